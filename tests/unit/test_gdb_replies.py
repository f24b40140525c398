"""The pure parts of going inside a process through gdb, on gdb's own output (captured from gdb 13.1):
its MI records, the ptrace refusal's words, arenas paired between gdb's malloc_info and the outside
walk. Real gdb on real targets: tests/live/test_attach.py."""
import os

from memgap.sources.gdb_mi import parse_int, parse_mi_line, parse_threads
from memgap.sources.ptrace_access import ptrace_refusal


def test_mi_records():
    rec = parse_mi_line('9^done,value="0x562aade8f530 \\"\\\\300\\\\034\\""')
    assert (rec.kind, rec.token, rec.cls) == ("result", 9, "done")
    assert parse_int(rec.results["value"]) == 0x562aade8f530
    rec = parse_mi_line('11^error,msg="The program being debugged was signaled while in a function called '
                        'from GDB.\\nGDB has restored the context to what it was before the call."')
    assert rec.cls == "error" and rec.results["msg"].splitlines()[1].startswith("GDB has restored")
    rec = parse_mi_line('8^done,threads=[{id="1",target-id="Thread 0x7f4ae590b740 (LWP 27192)",name="t",'
                        'frame={level="0",addr="0x00007f4ae59dd503",func="__GI___clock_nanosleep",args=['
                        '{name="clock_id",value="0"}]}},{id="2",target-id="LWP 27193"}],current-thread-id="1"')
    assert parse_threads(rec.results) == [("1", 27192), ("2", 27193)]
    assert parse_mi_line('~"Signal        Stop\\tPrint\\n"').text == "Signal        Stop\tPrint\n"
    assert parse_mi_line("(gdb) ").kind == "prompt"
    assert parse_mi_line("warning: not MI").kind == "other"
    assert parse_mi_line('*stopped,reason="exited-signalled",signal-name="SIGSEGV"').results["reason"] == \
        "exited-signalled"


def test_ptrace_refusal_names_the_yama_setting():
    assert ptrace_refusal(0, False, 0) is None  # nothing certain before trying
    assert "ptrace_scope is 3" in ptrace_refusal(3, True, 0)
    assert "only root" in ptrace_refusal(2, False, 0) and ptrace_refusal(2, True, 0) is None
    assert "already traced by PID 42 (strace)" in ptrace_refusal(None, True, 42, "strace")
    assert "ancestor" in ptrace_refusal(1, False, 0, refused=True)
    assert "not present" in ptrace_refusal(None, True, 0, refused=True)


def test_compare_arenas_pairs_main_and_nearest_sizes():
    from conftest import FIXTURES, read
    from memgap.inside.gdb import compare_arenas
    from memgap.sources.glibc import parse_malloc_info

    info = parse_malloc_info(read(os.path.join(FIXTURES, "glibc-2.36-py3.11-8threads", "malloc_info.xml")))
    # the outside walk's rows: every arena but one, sizes moved a little, in another order
    rows = [{"arena": f"#{i}", "main": a.nr == 0, "system": a.system + 4096 * (i % 3), "resident": 0,
             "free_resident": 0, "trim_releasable": 0} for i, a in enumerate(reversed(info.arenas[:-1]))]
    paired = compare_arenas(rows, info)
    assert len(paired) == len(info.arenas)
    assert paired[0]["main"] and paired[0]["arena"] == 0
    for r in paired:
        if r["system_outside"] is not None and r["system_gdb"] is not None:
            assert abs(r["system_gdb"] - r["system_outside"]) <= 8192, r
    assert sum(r["system_outside"] is None for r in paired) == 1
