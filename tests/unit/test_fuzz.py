"""Fuzzing: any text, or a captured file with random damage, parses or raises MalformedInput."""
import os
import re

from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import CAPTURE_DIRS, FIXTURES, read
from memgap.errors import MalformedInput
from memgap.sources import procfs
from memgap.sources.glibc import parse_malloc_info
from memgap.sources.glibc_tunables import parse_tunables
from memgap.sources.jemalloc import parse_jemalloc_stats_json
from memgap.sources.pymalloc import parse_debugmallocstats

PARSERS = {
    "proc_self_smaps.txt": procfs.parse_smaps,
    "proc_self_maps.txt": procfs.parse_maps,
    "proc_self_status.txt": procfs.parse_status,
    "malloc_info.xml": parse_malloc_info,
    "debugmallocstats.txt": parse_debugmallocstats,
}
SAMPLES = {name: read(os.path.join(CAPTURE_DIRS[-1], name))[:6000] for name in PARSERS}


def _survives(parse, text):
    try:
        parse(text)
    except MalformedInput:
        pass


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_any_text(text):
    for parse in (*PARSERS.values(), parse_jemalloc_stats_json, procfs.parse_smaps_pss):
        _survives(parse, text)
    assert isinstance(parse_tunables(text), dict) and isinstance(procfs.parse_vmstat(text), dict)  # never raise


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(PARSERS)), st.data())
def test_damaged_captures(name, data):
    text = SAMPLES[name]
    for _ in range(data.draw(st.integers(1, 5))):
        at = data.draw(st.integers(0, len(text)))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace"]))
        junk = data.draw(st.text(max_size=8))
        if kind == "delete":
            text = text[:at] + text[at + len(junk) + 1:]
        elif kind == "insert":
            text = text[:at] + junk + text[at:]
        else:
            text = text[:at] + junk + text[at + len(junk):]
    _survives(PARSERS[name], text)
    if name == "proc_self_smaps.txt":
        _survives(procfs.parse_smaps_pss, text)


@settings(max_examples=100, deadline=None)
@given(st.binary())
def test_pagemap_and_environ_bytes(data):
    procfs.parse_environ(data)
    _survives(procfs.count_pagemap, data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 300))
def test_elf_reader_never_raises(junk, cut):
    from memgap.sources.elf import parse_defines

    with open("/lib/x86_64-linux-gnu/libc.so.6", "rb") as fh:
        head = fh.read(4096)
    for data in (junk, head[:cut] + junk, b"\x7fELF\x02\x01" + junk):
        assert parse_defines(data, b"malloc") in (True, False, None)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 8192), st.integers(0, 4095))
def test_elf_symbol_reader_fails_only_with_malformed_input(junk, cut, at):
    """Garbage, a cut libc, or libc with bytes overwritten inside its headers: an ElfInfo or
    MalformedInput, never struct.error, IndexError, a hang or a huge allocation (ELF files built
    by hand, 32-bit and big-endian ones too: test_elf_symbols.py)."""
    from memgap.allocators.detect import signs
    from memgap.sources.elf import ElfInfo, parse_elf_bytes

    with open("/lib/x86_64-linux-gnu/libc.so.6", "rb") as fh:
        whole = fh.read()
    shoff = int.from_bytes(whole[0x28:0x30], "little")
    overwritten = bytearray(whole)
    overwritten[shoff + at:shoff + at + len(junk)] = junk[:len(whole) - shoff - at]
    for data in (junk, b"\x7fELF\x02\x01" + junk, b"\x7fELF\x01\x02" + junk, whole[:cut] + junk,
                 whole[:64] + junk, bytes(overwritten[:len(whole)])):
        try:
            assert isinstance(parse_elf_bytes(data, signs().query), ElfInfo)
        except MalformedInput as exc:
            assert str(exc).startswith("malformed ELF file: ")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 4096), st.integers(0, 1024))
def test_program_header_reader_fails_only_with_malformed_input(junk, cut, at):
    """Garbage, a cut libc, or libc with bytes overwritten in its ELF and program headers: a tuple of
    PT_LOAD segments or MalformedInput, never struct.error, IndexError, a hang or a huge allocation."""
    from memgap.sources.elf_segments import LoadSegment, parse_segments_bytes

    with open("/lib/x86_64-linux-gnu/libc.so.6", "rb") as fh:
        head = fh.read(8192)
    overwritten = bytearray(head)
    overwritten[at:at + len(junk)] = junk[:len(head) - at]
    for data in (junk, b"\x7fELF\x02\x01" + junk, b"\x7fELF\x01\x02" + junk, head[:cut] + junk,
                 bytes(overwritten[:len(head)])):
        try:
            segments = parse_segments_bytes(data)
        except MalformedInput as exc:
            assert str(exc).startswith("malformed ELF file: ")
        else:
            assert all(isinstance(s, LoadSegment) and 0 <= s.filesz <= s.memsz for s in segments)


def test_unicode_digits_are_not_counts():
    """'²'.isdigit() is True, but int('²') raises: found by the fuzzing above in /proc status."""

    for name, parse in PARSERS.items():
        _survives(parse, re.sub(r"(\d+)", "\u00b2\\1", SAMPLES[name], count=50))


# --- serve-metrics' requests ------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=2000))
def test_request_heads_parse_or_raise_bad_request(head):
    from memgap.metrics.server import BadRequest, Request, parse_head

    try:
        assert isinstance(parse_head(head), Request)
    except BadRequest as exc:
        assert exc.status in (400, 431, 505)


# --- memgap report on documents a careless or hostile user hands it (issue 23) -------------------

SAVED_DOCUMENTS = [os.path.join(FIXTURES, "documents", d, f)
                   for d, f in (("04f183d", "run.json"), ("04f183d", "lab.json"), ("b87b24e", "lab-sweep.json"))]
ODD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(allow_nan=False),
                       st.text(max_size=40), st.lists(st.integers(), max_size=3),
                       st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


def _paths(doc, prefix=()):
    """Every path to a value in a JSON document, as key and index tuples."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield from _paths(v, (*prefix, i))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SAVED_DOCUMENTS), st.data())
def test_report_refuses_or_renders_any_damaged_document(tmp_path_factory, path, data):
    """A saved document with fields replaced by values of any type, or removed: `memgap report` renders it
    or says in one line what is wrong (exit code 6), never a traceback."""
    import contextlib
    import io
    import json

    from memgap.cli import main

    with open(path) as fh:
        doc = json.load(fh)
    paths = [p for p in _paths(doc) if p]
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.sampled_from(paths))
        parent = doc
        for key in where[:-1]:
            parent = parent[key] if isinstance(parent, (dict, list)) and key in (parent if isinstance(parent, dict)
                                                                                else range(len(parent))) else None
        if isinstance(parent, dict) and where[-1] in parent:
            if data.draw(st.booleans()):
                parent[where[-1]] = data.draw(ODD_VALUES)
            else:
                del parent[where[-1]]
    damaged = tmp_path_factory.mktemp("damaged") / "doc.json"
    damaged.write_text(json.dumps(doc))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", str(damaged)])
    assert code in (0, 6), (code, err.getvalue()[-2000:])
    if code:
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
