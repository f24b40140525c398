"""The CLI's main() called in this process, where nothing is started: bad arguments refused where they
are parsed, malformed /proc files, a lab folder that cannot be made, `report` on a lab's
folder, each command's summary, `demo --list`. The CLI on real processes: tests/live/test_cli.py."""
import json

import pytest

MiB = 1 << 20


def test_malformed_proc_files(tmp_path):
    from memgap.errors import MalformedInput
    from memgap.explain.snapshot import snapshot_pid

    fake = tmp_path / "proc" / "4242"
    fake.mkdir(parents=True)
    (fake / "stat").write_text("4242 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 1 1\n")
    (fake / "maps").write_text("00400000-00401000 r-xp 00000000 fe:00 12 /bin/x\ngarbage line\n")
    with pytest.raises(MalformedInput):
        snapshot_pid(4242, proc_root=str(tmp_path / "proc"))


@pytest.mark.parametrize("args,said", [
    (["inspect", "-5"], "argument pid: '-5' is not a valid PID"),
    (["inspect", "0"], "argument pid: '0' is not a valid PID"),
    (["inspect", "12x"], "argument pid: '12x' is not a valid PID"),
    (["inspect", "1", "--tree", "--proc-root", "/nonexistent-memgap"], "'/nonexistent-memgap' is not a folder"),
    (["inspect", "1", "--deep", "--gdb-timeout", "0"], "argument --gdb-timeout: '0' is not a valid number of seconds"),
    (["top", "0", "--iterations", "1"], "argument pid: '0' is not a valid PID"),
    (["top", "-3"], "argument pid: '-3' is not a valid PID"),
    (["top", "1", "--interval", "0"], "argument --interval: '0' is not a valid number of seconds (more than 0)"),
    (["top", "1", "--interval", "-1"], "argument --interval: '-1' is not a valid number of seconds"),
    (["top", "1", "--iterations", "-1"], "argument --iterations: '-1' is not a valid count (a whole number, 0 or"),
    (["run", "--interval", "0", "--", "true"], "argument --interval: '0' is not a valid number of seconds"),
    (["run", "--interval", "-0.5", "--", "true"], "argument --interval: '-0.5' is not a valid number of seconds"),
    (["demo", "--interval", "0"], "argument --interval: '0' is not a valid number of seconds"),
    (["lab", "--timeout", "0", "--", "true"], "argument --timeout: '0' is not a valid number of seconds (more than 0)"),
    (["lab", "--timeout", "-5", "--", "true"], "argument --timeout: '-5' is not a valid number of seconds"),
    (["lab", "--timeout", "nan", "--", "true"], "argument --timeout: 'nan' is not a valid number of seconds"),
    (["lab", "--max-slowdown", "-1", "--", "true"], "argument --max-slowdown: '-1' is not a valid share (0 or more"),
    (["lab", "--reps", "0", "--", "true"], "argument --reps: '0' is not a valid count (a whole number from 1 up)"),
    (["lab", "--reps", "2.5", "--", "true"], "argument --reps: '2.5' is not a valid count"),
    (["lab", "--idle-after", "-1", "--", "true"], "argument --idle-after: '-1' is not a valid number of seconds (0 or"),
    (["nosuch"], "invalid choice: 'nosuch'"),
])
def test_bad_arguments_are_one_line_usage_errors(args, said, capsys):
    """Refused where they are parsed: exit code 2, one line naming the argument, the value and what
    was wanted, and the command's help to read (nothing runs, and no process is looked up)."""
    from memgap.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memgap: "), err
    assert said in err and "--help)" in err, err
    if args[0] != "nosuch":
        assert err.startswith(f"memgap: {args[0]}: "), err


def test_a_lab_folder_that_cannot_be_made_is_a_usage_error(tmp_path, capsys):
    from memgap.cli import main

    taken = tmp_path / "a-file"
    taken.write_text("")
    assert main(["lab", "--variant", "glibc", "--reps", "1", "--dir", str(taken), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err == (f"memgap: {taken} exists and is not a folder only you may write in: memgap records only into a "
                   "folder it makes; choose another --dir\n")


def _lab_folder(path, runs_of):
    """A lab's folder as memgap lab leaves it: lab.jsonl with its header and one line per run."""
    from dataclasses import asdict

    from memgap.documents.records import RunFigures
    from memgap.record.recording import RecordingWriter

    path.mkdir()
    events = RecordingWriter(str(path / "lab.jsonl"))
    events.write({"type": "header", "schema": "memgap.lab/1", "cmd": ["python", "work.py"], "reps": 2,
                  "variants": ["glibc", "glibc:trim=idle"], "skipped": [], "machine": {"cpus": 64}})
    order = 0
    for rep in (1, 2):
        for spec, idle in runs_of:
            order += 1
            events.write({"type": "run", **asdict(RunFigures(spec, rep, order, "ok", wall=1.0, duration=1.2,
                                                              idle=idle * MiB, baseline=30 * MiB, python=True))})
    events.close()


def test_report_rebuilds_a_lab_from_its_folder(tmp_path, capsys):
    from memgap.cli import main

    _lab_folder(tmp_path / "lab", [("glibc", 80), ("glibc:trim=idle", 40)])
    out = tmp_path / "lab.json"
    assert main(["report", str(tmp_path / "lab"), "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "memgap lab on 64 CPUs" in text  # the lab's machine, from its header
    assert "Verdict: idle RSS 40 MiB (range 40-40) against the baseline's 80 (80-80)" in text
    assert "rebuilt from lab.jsonl, which keeps neither --max-slowdown" in text
    assert "Apply glibc:trim=idle:" in text and "INCOMPLETE" not in text
    lab = json.loads(out.read_text())
    assert lab["schema"] == "memgap.lab/1" and lab["complete"] and len(lab["runs"]) == 4
    assert lab["recommendation"]["variant"] == "glibc:trim=idle"


def test_report_on_a_lab_folder_cut_short_says_so(tmp_path, capsys):
    from memgap.cli import main

    _lab_folder(tmp_path / "lab", [("glibc", 80)])  # the trim variant never ran
    assert main(["report", str(tmp_path / "lab")]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.endswith("INCOMPLETE: interrupted"), text


def test_each_commands_summary_is_its_modules_own_first_line():
    """The command list is written once per command in cli/__init__.py (so that a command
    imports only its own module); it must say what the module's docstring says."""
    from memgap.cli import COMMANDS, command_module

    for name, summary in COMMANDS.items():
        doc = " ".join((command_module(name).__doc__ or "").strip().split("\n\n")[0].split())
        assert doc.startswith(summary), (name, summary, doc)


def cli(capsys, *args):
    """memgap's CLI in this process (no interpreter to start): exit code, stdout, stderr."""
    from memgap.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_list_and_an_unknown_name(capsys):
    code, listed, _ = cli(capsys, "demo", "--list")
    assert code == 0
    rows = [line.split()[:3] for line in listed.splitlines()]
    assert rows == [["threadpool", "seed", "000"], ["asyncburst", "seed", "001"], ["trie", "seed", "002"],
                    ["multiproc", "seed", "003"], ["blockingpool", "seed", "004"]], listed
    code, out, err = cli(capsys, "demo", "nosuch")
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "no scenario 'nosuch'; choose from threadpool, asyncburst, trie, multiproc, blockingpool" in err
