"""Each command reads its options into a typed request at the edge (issue 16 item 4).

For every command: a realistic command line parsed by the command's own parser, and the
request ``from_args`` builds from it, compared field by field with the one written out here;
every option the parser has must reach a field of the request (an option added to the parser
but not to the request fails ``test_every_option_reaches_the_request``). Then the checks across
options, which fail in ``from_args``, before anything runs, with the messages the command has
always printed.
"""
from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from memgap.allocators.variants import DEFAULT_SPECS, parse_variant
from memgap.cli import COMMANDS, build_parser, command_module
from memgap.errors import UsageError
from memgap.metrics.scrape import Selection

# Options whose field has another name (a negated flag, a plural, a word that is a builtin), or
# several options that make one typed field (serve-metrics' target).
RENAMED = {
    "run": {"no_agent": "agent"},
    "lab": {"no_agent": "agent", "variant": "variants", "param": "params", "dir": "lab_dir"},
    "demo": {"list": "list_scenarios"},
    "serve-metrics": {"pid": "selection", "tree": "selection", "match": "selection", "listen_address": "address"},
}

ARGV = {
    "inspect": ["inspect", "1234", "--json", "out.json", "--regions", "--proc-root", "/proc", "--deep", "--trim",
                "--gdb-timeout", "2.5", "--gdb", "/usr/bin/gdb"],
    "top": ["top", "1234", "--interval", "0.5", "--tree", "--iterations", "3"],
    "run": ["run", "--interval", "0.2", "--json", "r.json", "--walk", "--phase-regex", r"phase: (\S+)", "--no-agent",
            "--load", "wrk -d1s http://127.0.0.1:8000/", "--rest", "1.5", "--", "python", "app.py"],
    "lab": ["lab", "--variant", "glibc:arena_max=2", "--variant", "jemalloc", "--reps", "2", "--timeout", "60",
            "--max-slowdown", "0.1", "--param", "WORKERS=1,2", "--param", "N=8", "--phase-regex", r"phase: (\S+)",
            "--idle-after", "1", "--load", "wrk -d1s http://127.0.0.1:8000/", "--rest", "2", "--process", "worker",
            "--objective", "peak", "--no-agent", "--metric", "rps", "--metric-regex", r"rps=(\d+)",
            "--memory-limit", "512M",
            "--json", "lab.json", "--markdown", "lab.md", "--html", "lab.html", "--dir", "lab.d", "--show-output",
            "--", "python", "w.py"],
    "report": ["report", "run.json.d", "--json", "out.json", "--html", "lab.html", "--markdown", "lab.md"],
    "demo": ["demo", "trie", "--json", "demo.json", "--interval", "0.2", "--walk"],
    "snapshot": ["snapshot", "--json", "-"],
    "agent": ["agent", "--path"],
    "serve-metrics": ["serve-metrics", "1234", "--tree", "--port", "9100", "--address", "127.0.0.1",
                      "--refresh", "5", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem", "--basic-auth-file",
                      "users", "--bearer-token-file", "token", "--read-timeout", "2", "--write-timeout", "3"],
}


def _expected(name: str) -> object:
    """The request each command line of ARGV must give, written out."""
    module = command_module(name)
    if name == "inspect":
        return module.InspectRequest(pid=1234, tree=False, json="out.json", regions=True, proc_root="/proc",
                                     deep=True, trim=True, gdb_timeout=2.5, gdb="/usr/bin/gdb")
    if name == "top":
        return module.TopRequest(pid=1234, interval=0.5, tree=True, iterations=3)
    if name == "run":
        return module.RunRequest(cmd=("python", "app.py"), interval=0.2, json="r.json", walk=True,
                                 phase_regex=r"phase: (\S+)", agent=False,
                                 load=("wrk", "-d1s", "http://127.0.0.1:8000/"), rest=1.5)
    if name == "lab":
        return module.LabRequest(
            cmd=("python", "w.py"),
            variants=tuple(parse_variant(s) for s in ("glibc", "glibc:arena_max=2", "jemalloc")),  # baseline first
            reps=2, timeout=60.0, max_slowdown=0.1, params=(("WORKERS", ("1", "2")), ("N", ("8",))),
            phase_regex=r"phase: (\S+)", idle_after=1.0, load=("wrk", "-d1s", "http://127.0.0.1:8000/"), rest=2.0,
            objective="peak", process="worker", agent=False, metric="rps", metric_regex=r"rps=(\d+)",
            memory_limit=512 << 20,
            json="lab.json", markdown="lab.md", html="lab.html", lab_dir="lab.d", show_output=True)
    if name == "report":
        return module.ReportRequest(path="run.json.d", json="out.json", html="lab.html", markdown="lab.md")
    if name == "demo":
        return module.DemoRequest(name="trie", list_scenarios=False, json="demo.json", interval=0.2, walk=True)
    if name == "snapshot":
        return module.SnapshotRequest(json="-")
    if name == "agent":
        return module.AgentRequest(path=True)
    assert name == "serve-metrics"
    return module.ServeMetricsRequest(selection=Selection(pid=1234, tree=True), port=9100, address="127.0.0.1",
                                      refresh=5.0, tls_cert_file="c.pem", tls_key_file="k.pem",
                                      basic_auth_file="users", bearer_token_file="token", read_timeout=2.0,
                                      write_timeout=3.0)


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser(argv[0]).parse_args(argv)


def _request_class(name: str) -> type:
    """The command module's one request class: a frozen dataclass named ...Request (run's: a named tuple,
    made before its command starts without importing dataclasses)."""
    module = command_module(name)
    found = [value for key, value in vars(module).items()
             if key.endswith("Request") and isinstance(value, type) and value.__module__ == module.__name__]
    assert len(found) == 1, f"{name}: one request class, found {found}"
    assert (dataclasses.is_dataclass(found[0]) and found[0].__dataclass_params__.frozen) or (
        name == "run" and issubclass(found[0], tuple) and hasattr(found[0], "_fields"))
    return found[0]


def _fields(cls: type) -> set[str]:
    return set(cls._fields) if issubclass(cls, tuple) else {f.name for f in dataclasses.fields(cls)}


def test_every_command_has_a_case():
    assert set(ARGV) == set(COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_reaches_the_request(name):
    cls = _request_class(name)
    args = _parse(ARGV[name])
    options = {RENAMED.get(name, {}).get(key, key) for key in vars(args) if key != "command"}
    assert options == _fields(cls), (
        f"{name}: the parser's options and {cls.__name__}'s fields differ: add the option to the request "
        "(or its new name to RENAMED)")
    assert cls.from_args(args) == _expected(name)


def test_lab_defaults_to_the_default_variants_with_the_baseline_first():
    request = _request_class("lab").from_args(_parse(["lab", "--", "python", "w.py"]))
    specs = [v.spec for v in request.variants]
    assert specs[len(specs) - len(DEFAULT_SPECS):] == list(DEFAULT_SPECS) and request.variants[0].is_baseline
    assert request.reps is None and request.agent and request.params == ()


def test_serve_metrics_match_is_compiled():
    request = _request_class("serve-metrics").from_args(_parse(["serve-metrics", "--match", "gunicorn: worker"]))
    assert request.selection == Selection(match=re.compile("gunicorn: worker"))


@pytest.mark.parametrize("argv, address", [
    ([], ("127.0.0.1", 9555)),  # loopback unless asked: the figures are about other users' processes
    (["--port", "0"], ("127.0.0.1", 0)),
    (["--address", "0.0.0.0"], ("0.0.0.0", 9555)),
    (["--listen-address", ":9100"], ("0.0.0.0", 9100)),
    (["--listen-address", "[::1]:9100"], ("::1", 9100)),
    (["--listen-address", "192.0.2.2:80"], ("192.0.2.2", 80)),
])
def test_serve_metrics_listen_address(argv, address):
    request = _request_class("serve-metrics").from_args(_parse(["serve-metrics", "1", *argv]))
    assert (request.address, request.port) == address


def test_demo_list_takes_any_name():
    request = _request_class("demo").from_args(_parse(["demo", "nope", "--list"]))
    assert request.list_scenarios


def _re_error(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    raise AssertionError(f"{pattern!r} compiles")


MISUSE = [
    (["inspect", "1", "--tree", "--deep"], "--deep and --trim look inside one process: leave out --tree"),
    (["inspect", "1", "--tree", "--trim"], "--deep and --trim look inside one process: leave out --tree"),
    (["run"], "no command given: memgap run [options] -- CMD ..."),
    (["run", "--json", "x.json", "--"], "no command given: memgap run [options] -- CMD ..."),
    (["lab", "--"], "no workload given: memgap lab [options] -- CMD ..."),
    (["lab", "--phase-regex", "(", "--", "true"], f"--phase-regex: {_re_error('(')}"),
    (["lab", "--metric", "x", "--metric-regex", "[", "--", "true"], f"--metric-regex: {_re_error('[')}"),
    (["lab", "--process", "*", "--", "true"], f"--process: {_re_error('*')}"),
    (["lab", "--metric-regex", r"(\d+)", "--", "true"], "--metric-regex needs --metric NAME (what the number is)"),
    (["lab", "--param", "N", "--", "true"], "--param 'N': expected NAME=V1,V2,..."),
    (["lab", "--param", "N=,", "--", "true"], "--param 'N=,': expected NAME=V1,V2,..."),
    (["lab", "--variant", "bogus", "--", "true"],
     "variant 'bogus': unknown allocator, runtime or library 'bogus' (choose from glibc, jemalloc, tcmalloc, "
     "mimalloc, go, jvm, node, arrow, torch)"),
    (["demo", "nope"], "no scenario 'nope'; choose from threadpool, asyncburst, trie, multiproc, blockingpool"),
    (["serve-metrics"], "serve-metrics: give a PID, --tree PID or --match REGEX (one of them)"),
    (["serve-metrics", "1", "--match", "x"], "serve-metrics: give a PID, --tree PID or --match REGEX (one of them)"),
    (["serve-metrics", "--tree", "--match", "x"], "serve-metrics: --tree takes a PID, not --match"),
    (["serve-metrics", "1", "--listen-address", ":1", "--port", "2"],
     "serve-metrics: give --listen-address, or --address and --port, not both"),
    (["serve-metrics", "1", "--tls-cert-file", "c.pem"],
     "serve-metrics: --tls-cert-file and --tls-key-file go together"),
    (["serve-metrics", "--match", "("],
     f"serve-metrics: --match '(' is not a regular expression: {_re_error('(')}"),
]


@pytest.mark.parametrize(("argv", "message"), MISUSE, ids=[" ".join(argv) for argv, _ in MISUSE])
def test_a_bad_combination_fails_in_from_args(argv, message):
    args = _parse(argv)
    with pytest.raises(UsageError) as raised:
        _request_class(argv[0]).from_args(args)
    assert str(raised.value) == message
    assert raised.value.exit_code == 2
