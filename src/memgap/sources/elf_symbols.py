"""The few symbols of an ELF symbol table that a question asks about, found at the speed of the bytes.

A C++ library exports 50,000 to 500,000 symbols, of which a handful can name an allocator. Rather
than make each name a Python string, the string table's bytes are searched with one compiled
regular expression for the names asked about (exact names, endings: an API under any prefix, and
beginnings), every offset at which such a name can start is collected, and only the symbol entries
whose ``st_name`` is one of those offsets are decoded. A linker merges string tails (``malloc`` may
be the end of ``__libc_malloc``), so a name may start in the middle of a longer string: the offsets
collected cover every start that gives a name asked about, and each entry found is checked against
the question once decoded, so the result is that of decoding every symbol and keeping those asked.

The search runs over the table reversed, where every name's end is the start of a run after a NUL
(or the ``@`` of a version suffix, which is not part of the name): one literal byte the regular
expression engine skips to, then a branch of the names' ends factored into a trie.
"""
from __future__ import annotations

import array
import bisect
import functools
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass

FIND_BUDGET = 1 << 22   # offsets x entries searched value by value; more, and one pass over the entries
_ARRAY_CODE = next(code for code in "IL" if array.array(code).itemsize == 4)


@dataclass(frozen=True)
class SymbolQuery:
    """Which symbols (and which byte strings of ``.rodata``) a reader of ELF files asks about.

    A symbol is asked about if its name (version suffix left off) is one of ``names``, ends with
    one of ``endings`` or begins with one of ``beginnings``. None of them may be empty or hold a
    NUL or an ``@``. Frozen and hashable: the caches of the facts read are keyed by it (its
    ``fingerprint`` on disk)."""

    names: frozenset[str] = frozenset()
    endings: tuple[str, ...] = ()
    beginnings: tuple[str, ...] = ()
    rodata: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        for word in (*self.names, *self.endings, *self.beginnings):
            if not word or "\0" in word or "@" in word:
                raise ValueError(f"a symbol query's name cannot be empty or hold NUL or @: {word!r}")
        if not all(self.rodata):
            raise ValueError("a symbol query's .rodata strings cannot be empty")

    def wants(self, name: str) -> bool:
        """Whether a symbol of this name is asked about."""
        return name in self.names or name.endswith(self.endings) or name.startswith(self.beginnings)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A short digest of the question: what facts kept on disk were read for."""
        import hashlib  # here: only a look that keeps or finds facts on disk needs it

        text = repr((sorted(self.names), sorted(self.endings), sorted(self.beginnings), sorted(self.rodata)))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def asks_symbols(self) -> bool:
        return bool(self.names or self.endings or self.beginnings)


@functools.lru_cache(maxsize=64)
def _ends_regexes(query: SymbolQuery) -> tuple[re.Pattern[bytes], re.Pattern[bytes]] | None:
    """NUL (or @), then one of the names or endings reversed: where one ends, in the reversed table.
    Two expressions, each starting with one literal byte, which the engine skips to at memchr's pace."""
    words = [w.encode()[::-1] for w in (*query.names, *query.endings)]
    if not words:
        return None
    alternatives = _trie(sorted(set(words)))
    return re.compile(b"\0" + alternatives), re.compile(b"@" + alternatives)


def _trie(words: list[bytes]) -> bytes:
    """An alternation of ``words`` with their shared beginnings factored out: fewer branches tried
    at each position. A word that is another's beginning ends the branch (any one found will do)."""
    if b"" in words:
        return b""
    heads: dict[bytes, list[bytes]] = {}
    for word in words:
        heads.setdefault(word[:1], []).append(word[1:])
    branches = [re.escape(head) + _trie(rest) for head, rest in heads.items()]
    return branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"


def name_starts(strings: bytes, query: SymbolQuery) -> list[tuple[int, int]]:
    """The offsets of ``strings`` (a string table) at which a name the query asks about may start, as
    sorted, disjoint (first, last) spans: a superset, each entry found is checked once decoded."""
    spans: list[tuple[int, int]] = []
    regexes = _ends_regexes(query)
    if regexes is not None:
        backwards = bytearray(strings)
        backwards.append(0)   # a name running to the table's end ends there
        backwards.reverse()
        size = len(strings)
        for regex in regexes if b"@" in strings else regexes[:1]:
            for found in regex.finditer(backwards):
                end = size - found.start()   # the offset of the NUL or @ just past the name
                begins = strings.rfind(b"\0", 0, end) + 1
                begins = max(begins, strings.rfind(b"@", begins, end) + 1)
                spans += _spans_ending(strings, query, begins, end)
    for beginning in {b.encode() for b in query.beginnings}:
        at = strings.find(beginning)
        while at >= 0:
            spans.append((at, at))
            at = strings.find(beginning, at + 1)
    return _merged(spans)


def _spans_ending(strings: bytes, query: SymbolQuery, begins: int, end: int) -> list[tuple[int, int]]:
    """Where a name asked about starts within ``strings[begins:end]``, a string with no NUL or @ in it."""
    spans = []
    for name in query.names:
        start = end - len(name)
        if start >= begins and strings.startswith(name.encode(), start):
            spans.append((start, start))
    for ending in query.endings:
        last = end - len(ending)
        if last >= begins and strings.startswith(ending.encode(), last):
            spans.append((begins, last))   # a name from anywhere before it ends so
    return spans


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def entries_named(table: bytes, entsize: int, big_endian: bool, spans: list[tuple[int, int]]) -> list[int]:
    """The indices of the entries of a symbol table whose ``st_name`` (a 4-byte word at the start of
    each entry, in either class) lies in one of ``spans`` (sorted, disjoint, first and last included)."""
    count = len(table) // entsize
    if not spans or not count:
        return []
    column = bytearray(4 * count)   # every entry's st_name, one after the other
    for byte in range(4):
        column[byte::4] = table[byte:count * entsize:entsize]
    offsets = sum(last - first + 1 for first, last in spans)
    if offsets * count <= FIND_BUDGET:
        hits = []
        for first, last in spans:
            for offset in range(first, last + 1):
                needle = offset.to_bytes(4, "big" if big_endian else "little")
                at = column.find(needle)
                while at >= 0:
                    if at % 4 == 0:
                        hits.append(at // 4)
                    at = column.find(needle, at + 1)
        return sorted(set(hits))
    values = array.array(_ARRAY_CODE, column)
    if big_endian != (sys.byteorder == "big"):
        values.byteswap()
    firsts = [first for first, _last in spans]
    return [i for i, value in enumerate(values)
            if (k := bisect.bisect_right(firsts, value) - 1) >= 0 and value <= spans[k][1]]



ANCHOR_LEAST = 6     # bytes: a shorter anchor turns up too often in any binary's strings
ANCHOR_CHECKS = 256  # anchors checked one by one in a piece; more, and its strings are searched for whole
Anchors = tuple[tuple[bytes, tuple[tuple[bytes, int], ...]], ...]


@functools.lru_cache(maxsize=64)
def rodata_anchors(strings: tuple[bytes, ...]) -> Anchors:
    """``strings`` grouped by an anchor they share (the allocators' messages share ``malloc``): each
    anchor with the strings that hold it and where. Searching a piece of ``.rodata`` once for the
    anchor, then checking the few places it occurs, beats searching it once per string. Greedy: the
    substring (``ANCHOR_LEAST`` bytes or more) held by the most strings left, the longest of those;
    a string that shares none is its own anchor."""
    left = sorted(set(strings))
    groups = []
    while left:
        candidates = {s[i:j] for s in left for i in range(len(s)) for j in range(i + ANCHOR_LEAST, len(s) + 1)}
        candidates.update(left)
        anchor = max(candidates, key=lambda a: (sum(a in s for s in left), len(a), a))
        held = [s for s in left if anchor in s]
        groups.append((anchor, tuple((s, s.find(anchor)) for s in held)))
        left = [s for s in left if anchor not in s]
    return tuple(groups)


def strings_in(data: bytes, anchors: Anchors, found: set[bytes]) -> None:
    """Add to ``found`` each string of ``anchors`` (``rodata_anchors``) that starts within ``data``
    and fits in it (one that starts in it and runs past its end is for the next piece to find)."""
    for anchor, held in anchors:
        wanted = [(s, at) for s, at in held if s not in found]
        pos = data.find(anchor) if wanted else -1
        checks = 0
        while pos >= 0:
            checks += 1
            if checks > ANCHOR_CHECKS:  # an anchor everywhere: a search per string costs less than this loop
                found.update(s for s, _at in wanted if s in data)
                break
            # a negative start would count from the end: a string that starts before data is not in it
            found.update(s for s, at in wanted if pos >= at and data.startswith(s, pos - at))
            pos = data.find(anchor, pos + 1)
