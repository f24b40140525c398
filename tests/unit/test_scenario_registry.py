"""The scenarios' registry, their knobs (flag, then environment, then default) and their phase lines, in
this process. The scenarios run for real as subprocesses: tests/live/test_scenarios.py."""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys

import pytest

from memgap.scenarios import SCENARIOS, ScenarioInfo, _common, scenario_command


def test_registry_lists_the_five_seeds():
    assert sorted(SCENARIOS) == ["asyncburst", "blockingpool", "multiproc", "threadpool", "trie"]
    assert sorted(info.seed for info in SCENARIOS.values()) == ["000", "001", "002", "003", "004"]
    for name, info in SCENARIOS.items():
        assert isinstance(info, ScenarioInfo)
        assert info.name == name
        assert info.module == f"memgap.scenarios.{name}"
        assert importlib.util.find_spec(info.module) is not None
        assert info.summary and "\n" not in info.summary
        assert "rest" in info.knobs
        for knob, (var, default, help_) in info.knobs.items():
            assert re.fullmatch(r"[a-z][a-z0-9_]*", knob)
            assert var == "MEMGAP_" + knob.upper()
            assert isinstance(default, (int, float, str)) and help_
        for phase in info.phases:
            assert _common.PHASE_NAME.match(phase)
        with pytest.raises(dataclasses.FrozenInstanceError):
            info.seed = "999"  # type: ignore[misc]


def test_scenario_command():
    assert scenario_command("threadpool") == [sys.executable, "-m", "memgap.scenarios.threadpool"]
    cmd = scenario_command("threadpool", payload_kib=64, threads=4, rest=0.0)
    # registry order, dashes in flags
    assert cmd[3:] == ["--threads", "4", "--payload-kib", "64", "--rest", "0.0"]
    assert scenario_command("trie", **{"prune-pct": 10})[3:] == ["--prune-pct", "10"]
    with pytest.raises(ValueError, match="nope"):
        scenario_command("threadpool", nope=1)
    with pytest.raises(KeyError):
        scenario_command("no-such-scenario")


def test_knob_precedence_flag_then_env_then_default():
    args = _common.parse_knobs(
        "threadpool",
        ["--threads", "3", "--payload_kib", "8"],
        environ={"MEMGAP_THREADS": "4", "MEMGAP_PASSES": "2", "MEMGAP_REST": "0.25"},
        announce=False,
    )
    assert (args.threads, args.passes, args.payload_kib, args.rest) == (3, 2, 8, 0.25)
    assert args.chunks == SCENARIOS["threadpool"].knobs["chunks"][1]
    assert isinstance(args.rest, float) and isinstance(args.threads, int)
    # an empty variable counts as unset
    args = _common.parse_knobs("threadpool", [], environ={"MEMGAP_THREADS": ""}, announce=False)
    assert args.threads == 32


@pytest.mark.parametrize(
    "argv, environ",
    [
        ([], {"MEMGAP_THREADS": "many"}),
        ([], {"MEMGAP_THREADS": "0"}),
        (["--threads", "-1"], {}),
        (["--rest", "-1"], {}),
        (["--no-such-knob", "1"], {}),
    ],
)
def test_bad_knob_values_exit_2(argv, environ, capsys):
    with pytest.raises(SystemExit) as exc:
        _common.parse_knobs("threadpool", argv, environ=environ, announce=False)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    if environ:
        assert "MEMGAP_THREADS" in err


def test_mark_prints_a_phase_line(capsys):
    rss = _common.mark("post-test-mark")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"memgap-phase: post-test-mark rss_kib={rss}"]
    assert rss > 1024
    with pytest.raises(ValueError):
        _common.mark("Post Import")
