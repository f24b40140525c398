"""A pytest plugin: what each test leaves behind, measured, and a limit on it.

Off unless asked: ``--memgap`` measures every test and prints the tests that left most;
``--memgap-retained SIZE`` sets a limit for every test, the marker
``@pytest.mark.memgap_retained("50 MiB", warmup=1, on="live")`` one test's.

Measured, not waited for: when a test's fixtures are set up and when its call ends (in
``pytest_runtest_makereport``, outside the phases' timing, so ``--durations`` shows the
test's own time) the plugin reads, instantly, the bytes of Python's small objects
(pymalloc's blocks in use), glibc's bytes in use (``mallinfo2``: uordblks + hblkhd) and free
(fordblks), per arena, and RSS. What the test left is the difference. The limit applies to
the live bytes (objects the test kept) unless ``on="rss"`` (``--memgap-limit-on rss``);
memory the allocator keeps free after the test dropped its objects is then reported, as
allocator retention, not failed. A full collection runs only when a test's figure is over
1 MiB (or its limit), and RSS is waited for only when an RSS limit is about to fail.

A warm-up (``warmup=N``) runs the whole test N times first, each with fresh fixtures and
unmeasured, as a rerun does. A test over its limit runs once more, unreported, with a
census of Python's objects by type before and after, so its failure names the types that
grew. Loaded by pytest in every session, so it imports memgap only once a test is measured.
"""
from __future__ import annotations

import gc
import re
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    from memgap_pytest.readings import Census, Growth, Meter, Reading
    from memgap_pytest.text import Outcome

COLLECT_OVER = 1 << 20  # a test whose figure grew more than this gets a full collection, and a second reading
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_ON = ("live", "rss")
_MARKER_KEYS = ("limit", "warmup", "on")


def parse_size(text: object) -> int:
    """ "50 MiB", "1.5G", "4096", 4096 -> bytes (binary units: MB means MiB, as in memgap's output)."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", str(text)) if isinstance(text, str) else None
    if not found or found.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (say 50 MiB, 1.5 GiB, or bytes)")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


@dataclass(frozen=True)
class Spec:
    """How one test is measured: its limit (bytes; None: none), on what, after how many warm-ups."""

    limit: int | None
    on: str = "live"
    warmup: int = 0


@dataclass
class _State:
    summary: bool              # --memgap: every test measured, the summary printed
    default: Spec              # what --memgap-retained and --memgap-limit-on give every test
    meter: Meter | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    notes: set[str] = field(default_factory=set)
    collections: int = 0
    usage: str = ""            # xdist's controller: a worker's usage error, said at the end
    seconds: float = 0.0       # spent reading (xdist: the workers' added up)
    readings: int = 0

    def get_meter(self) -> Meter:
        if self.meter is None:
            from memgap_pytest.readings import Meter

            self.meter = Meter()
            self.notes.add(self.meter.note)
        return self.meter


_STATE = pytest.StashKey[_State]()
_SPEC = pytest.StashKey[Spec]()
_MODE = pytest.StashKey[str]()               # "warmup", "measure" or "census": the run under way
_BEFORE: pytest.StashKey[Reading] = pytest.StashKey()
_CENSUS: pytest.StashKey[Census] = pytest.StashKey()
_GREW: pytest.StashKey[Growth] = pytest.StashKey()          # the measured run's growth, once over its limit
_SECOND: pytest.StashKey[tuple[Growth, list[tuple[str, int, int]]]] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memgap", "memory a test leaves behind, by memgap")
    group.addoption("--memgap", action="store_true",
                    help="measure what every test leaves (live bytes, RSS) and summarise the most")
    group.addoption("--memgap-retained", metavar="SIZE", default=None,
                    help="fail any test that leaves more than SIZE (e.g. 50MiB) live; a marker's limit wins")
    group.addoption("--memgap-limit-on", metavar="live|rss", default="live",
                    help="what --memgap-retained limits: live bytes (objects kept; default) or RSS "
                         "(allocator retention included)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "memgap_retained(limit, warmup=0, on='live'): fail when the test leaves "
                                       "more than `limit` live bytes (on='rss': RSS), after `warmup` runs")
    on = config.getoption("--memgap-limit-on")
    if on not in _ON:
        raise pytest.UsageError(f"--memgap-limit-on: {on!r} is neither live nor rss")
    raw = config.getoption("--memgap-retained")
    try:
        limit = parse_size(raw) if raw is not None else None
    except ValueError as exc:
        raise pytest.UsageError(f"--memgap-retained: {exc}") from None
    config.stash[_STATE] = _State(bool(config.getoption("--memgap")), Spec(limit, on))


def _spec_of(item: pytest.Item, default: Spec) -> Spec:
    """The marker's Spec, or the session's; pytest.UsageError, one line, for a bad marker."""
    marker = item.get_closest_marker("memgap_retained")
    if marker is None:
        return default
    where = f"memgap_retained on {item.nodeid}"
    unknown = sorted(set(marker.kwargs) - set(_MARKER_KEYS))
    if unknown or len(marker.args) > 1:
        raise pytest.UsageError(f"{where}: takes (limit, warmup=0, on='live'), not {unknown or marker.args}")
    limit = marker.args[0] if marker.args else marker.kwargs.get("limit")
    if limit is None:
        raise pytest.UsageError(f"{where}: no size; say @pytest.mark.memgap_retained(\"50 MiB\")")
    warmup, on = marker.kwargs.get("warmup", 0), marker.kwargs.get("on", default.on)
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise pytest.UsageError(f"{where}: warmup={warmup!r} is not a number of runs")
    if on not in _ON:
        raise pytest.UsageError(f"{where}: on={on!r} is neither 'live' nor 'rss'")
    try:
        return Spec(parse_size(limit), on, warmup)
    except ValueError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[_STATE]
    try:
        for item in items:
            item.stash[_SPEC] = _spec_of(item, state.default)
    except pytest.UsageError as exc:
        out = getattr(config, "workeroutput", None)
        if out is None:
            raise
        # an xdist worker: raised here it is the controller's INTERNALERROR; the controller
        # says it instead (pytest_testnodedown), and no test runs
        out["memgap_usage"] = str(exc)
        items.clear()


def _measured(item: pytest.Item) -> tuple[_State, Spec] | None:
    state, spec = item.config.stash.get(_STATE, None), item.stash.get(_SPEC, None)
    if state is None or spec is None or (spec.limit is None and not state.summary):
        return None
    return state, spec


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """A test with a limit: its warm-ups, the measured run, and a census run if it failed, each
    through pytest's own protocol (fresh fixtures each time); only the measured run is reported."""
    measured = _measured(item)
    if measured is None or measured[1].limit is None:
        return None  # pytest's protocol; makereport measures it when --memgap asks
    from _pytest.runner import runtestprotocol

    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    # tear down the test's own fixtures after a warm-up, nothing above them (their parent's chain)
    this_level = cast(pytest.Item, item.parent)
    for _ in range(measured[1].warmup):
        item.stash[_MODE] = "warmup"
        runtestprotocol(item, log=False, nextitem=this_level)
    item.stash[_MODE] = "measure"
    reports = runtestprotocol(item, log=False, nextitem=nextitem)
    if _GREW in item.stash:
        _name_the_types(item, nextitem, reports, measured[1])
    item.stash[_MODE] = "measure"
    for report in reports:
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _name_the_types(item: pytest.Item, nextitem: pytest.Item | None, reports: list[pytest.TestReport],
                    spec: Spec) -> None:
    """The census run: the failed call's message rewritten with the types that grew in it."""
    from _pytest.runner import runtestprotocol

    from memgap_pytest.text import failure

    assert spec.limit is not None
    item.stash[_MODE] = "census"
    second = runtestprotocol(item, log=False, nextitem=nextitem)
    grew = item.stash[_GREW]
    call = next(r for r in reports if r.when == "call")
    found = item.stash.get(_SECOND, None)
    why_not = "" if found else f"the second run did not {'pass' if any(r.failed for r in second) else 'run'}"
    call.longrepr = failure(grew, spec.limit, spec.on, spec.warmup, found[0] if found else None,
                            found[1] if found else None, why_not)
    del item.stash[_GREW]
    if found:
        del item.stash[_SECOND]


def _measure(state: _State, spec: Spec, before: Reading) -> Growth:
    """What grew since ``before``; read again after a full collection when it looks like more than
    COLLECT_OVER (or the limit), and once RSS holds still when an RSS limit would fail."""
    from memgap_pytest.readings import growth

    meter = state.get_meter()
    grew = growth(before, meter.read())
    figure = grew.rss if spec.on == "rss" else grew.live
    if figure > min(COLLECT_OVER, spec.limit if spec.limit is not None else COLLECT_OVER):
        gc.collect()
        state.collections += 1
        rss_fails = spec.on == "rss" and spec.limit is not None and grew.rss > spec.limit
        grew = growth(before, meter.settled() if rss_fails else meter.read())
    return grew


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report: pytest.TestReport = yield
    measured = _measured(item)
    mode = item.stash.get(_MODE, "measure")
    if measured is None or mode == "warmup" or call.when == "teardown":
        return report
    state, spec = measured
    if call.when == "setup":
        if report.passed:
            if mode == "census":
                gc.collect()
                from memgap_pytest.readings import census

                item.stash[_CENSUS] = census()
            item.stash[_BEFORE] = state.get_meter().read()
        return report
    before = item.stash.get(_BEFORE, None)
    if before is None:
        return report
    del item.stash[_BEFORE]
    grew = _measure(state, spec, before)
    if mode == "census":
        _census_after(item, grew)
    else:
        _judge(item, report, state, spec, grew)
    return report


def _census_after(item: pytest.Item, grew: Growth) -> None:
    from memgap_pytest.readings import census, types_grown

    before = item.stash.get(_CENSUS, None)
    if before is not None:
        del item.stash[_CENSUS]
        item.stash[_SECOND] = (grew, types_grown(before, census(skip=before)))


def _judge(item: pytest.Item, report: pytest.TestReport, state: _State, spec: Spec, grew: Growth) -> None:
    from memgap_pytest.text import Outcome, failure

    over = spec.limit is not None and (grew.rss if spec.on == "rss" else grew.live) > spec.limit
    failed = over and report.passed
    state.outcomes.append(Outcome(item.nodeid, grew, spec.limit, spec.on, failed))
    if failed and spec.limit is not None:
        report.outcome = "failed"
        report.longrepr = failure(grew, spec.limit, spec.on, spec.warmup, None, None,
                                  "the test was not run again (another plugin runs its protocol)")
        item.stash[_GREW] = grew


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker sends what it measured to the controller (``workeroutput``); the controller
    exits as a usage error where a worker found one."""
    state, out = session.config.stash.get(_STATE, None), getattr(session.config, "workeroutput", None)
    if state is not None and state.usage:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    if state is None or out is None:
        return
    meter = state.meter
    out["memgap"] = {"outcomes": [o.to_dict() for o in state.outcomes], "notes": sorted(state.notes),
                     "collections": state.collections, "seconds": meter.seconds if meter else 0.0,
                     "readings": meter.readings if meter else 0}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: a worker's results added to the session's."""
    from memgap_pytest.text import Outcome

    output = getattr(node, "workeroutput", {})
    state, sent = node.config.stash.get(_STATE, None), output.get("memgap")
    if state is not None and output.get("memgap_usage"):
        state.usage = str(output["memgap_usage"])
    if state is None or not isinstance(sent, dict):
        return
    state.outcomes += [Outcome.from_dict(o) for o in sent.get("outcomes", [])]
    state.notes.update(sent.get("notes", []))
    state.collections += int(sent.get("collections", 0))
    state.seconds += float(sent.get("seconds", 0.0))
    state.readings += int(sent.get("readings", 0))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None and state.usage:
        terminalreporter.write_line(f"ERROR: {state.usage}", red=True)
    if state is None or not state.summary or not state.outcomes:
        return
    from memgap_pytest.text import summary

    seconds = state.seconds + (state.meter.seconds if state.meter else 0.0)
    readings = state.readings + (state.meter.readings if state.meter else 0)
    terminalreporter.section("memgap: what each test left behind (MiB)")
    for line in summary(state.outcomes, state.notes):
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"{len(state.outcomes)} tests measured: {readings} readings took {seconds:.2f} s, "
                                f"{state.collections} full collections")
