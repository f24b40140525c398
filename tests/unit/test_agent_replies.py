"""The native agent's replies, captured from the agent in real programs (fixtures/agent/), parsed and
fuzzed; its build refused without a compiler, and into a cache folder others can write. The real
library preloaded into real programs: tests/live/test_agent.py."""
import os

import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIXTURES
from memgap.errors import MalformedInput, MemgapError

AGENT_FIXTURES = os.path.join(FIXTURES, "agent")


def fixture(name):
    with open(os.path.join(AGENT_FIXTURES, name)) as fh:
        return fh.read()


def test_parse_glibc_reply():
    from memgap.agent.reply import parse_report

    report = parse_report(fixture("stats-glibc.txt"))
    assert report.allocator == "glibc" and report.malloc_from.endswith("libc.so.6")
    assert len(report.malloc_info.arenas) == 16  # 16 blocking threads, 2 CPUs: 8 per CPU
    # the XML's totals and mallinfo2 describe the same heap
    assert report.mallinfo.arena == sum(a.system for a in report.malloc_info.arenas)
    assert report.trimmer["mode"] == "off" and report.trimmer["trims"] == 0


def test_parse_other_allocators():
    from memgap.agent.reply import parse_report

    je = parse_report(fixture("stats-jemalloc.txt"))
    assert je.allocator == "jemalloc" and je.jemalloc.resident >= je.jemalloc.allocated > 0
    tc = parse_report(fixture("stats-tcmalloc.txt"))
    assert tc.allocator == "tcmalloc" and tc.tcmalloc["generic.heap_size"] > 0
    mi = parse_report(fixture("stats-mimalloc.txt"))
    assert mi.allocator == "mimalloc" and mi.mallinfo is None and mi.jemalloc is None


def test_parse_trim_reply():
    from memgap.agent.reply import parse_trim

    pid, result = parse_trim(fixture("trim-glibc.txt"))
    assert pid == 31433 and result.route == "agent"
    assert result.rss_before - result.rss_after == result.released > 0
    with pytest.raises(MalformedInput):  # a reply whose figures disagree with each other
        parse_trim(fixture("trim-glibc.txt").replace("released=15450112", "released=15450113"))


def test_parse_an_exit_record_with_its_trimmers_trims():
    """A C program's exit record under `memgap run` with MEMGAP_TRIM_EVERY=0.5 (a burst of 120 MiB in
    2 KiB blocks, one in sixteen kept, then 4 s asleep): each trim with its span and its thread's CPU."""
    from memgap.agent.reply import parse_report
    from memgap.documents.trim import TrimRecord, TrimRoute

    report = parse_report(fixture("exit-trim-every.txt"))
    assert report.trimmer["mode"] == "every" and len(report.trims) == report.trimmer["trims"] == 8
    # its CPU within its span (printed to the microsecond): the trim ran on the CPU all along
    assert all(t.route is TrimRoute.TRIMMER and t.started < t.time and 0 < t.cpu <= t.time - t.started + 1e-5
               for t in report.trims), report.trims
    assert sum(t.released for t in report.trims) == report.trimmer["released"]  # the first gave back the burst
    assert [t.time for t in report.trims] == sorted(t.time for t in report.trims) < [report.exit["time"]] * 8
    summary = report.summary()
    assert [TrimRecord.from_dict(t) for t in summary["trims"]] == report.trims


@pytest.mark.parametrize("cut", [10, 200, 5000, -6])
def test_cut_short_reply_is_an_error(cut):
    from memgap.agent.reply import parse_report

    with pytest.raises(MalformedInput):
        parse_report(fixture("stats-glibc.txt")[:cut])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzzed_replies_parse_or_raise_malformed(data):
    from memgap.agent.reply import parse_report, parse_trim

    text = data.draw(st.sampled_from([fixture("stats-glibc.txt"), fixture("stats-jemalloc.txt"),
                                      fixture("trim-glibc.txt")]))
    pos = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.text(max_size=20))
    mutated = text[:pos] + junk + text[pos + data.draw(st.integers(0, 30)):]
    for parse in (parse_report, parse_trim):
        try:
            parse(mutated)
        except MalformedInput:
            pass


def test_no_compiler_is_a_clear_error(monkeypatch, tmp_path):
    from memgap.errors import ToolMissing
    from memgap.native import build as native_build

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(ToolMissing) as info:
        package = os.path.dirname(os.path.dirname(native_build.__file__))
        native_build.compile_c(os.path.join(package, "agent", "agent.c"), "never-built", ["-shared"], str(tmp_path))
    assert info.value.exit_code == 9 and "apt-get install gcc" in str(info.value)


def test_a_cache_folder_someone_else_can_write_is_refused(monkeypatch, tmp_path):
    import tempfile

    from memgap.native import build as native_build

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    folder = tmp_path / f"memgap-native-{os.getuid()}"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    with pytest.raises(MemgapError, match="closed to others"):
        native_build.cache_dir()
