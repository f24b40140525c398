"""A small DWARF reader: exactly what the Go reader needs of a Go program's ``.debug_info``.

Struct layouts (each member's offset and type), type sizes, array lengths, named constants
(``runtime.heapArenaBytes``, ``runtime.arenaBaseOffsetUintptr``) and global variables' addresses
(``DW_OP_addr``). Go's struct field offsets change between releases, so they are read from the
program itself, never assumed.

Why a reader of its own, not ``gdb -batch -ex 'ptype/o ...'``: it needs no gdb on the machine, it
parses bytes (tested on a capture and on garbage), and it reads the program's file once per build,
only the units named "runtime" (Go's linker puts every type there) and "internal/runtime/gc": 90 ms
of a 750 KB ``.debug_info`` (130 ms for all of it), where gdb takes seconds to load the same symbols.
It knows DWARF 2-5's forms (Go 1.26 writes DWARF 5; earlier releases DWARF 4), but reads names
only from inline strings and ``.debug_str``/``.debug_line_str`` (Go writes inline strings); a
``strx`` name (another compiler's split DWARF) is left unnamed.

Every malformed input raises ``MalformedInput`` (a program's file may be anything).
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from memgap.errors import MalformedInput

TAG_ARRAY, TAG_MEMBER, TAG_POINTER, TAG_STRUCT, TAG_TYPEDEF = 0x01, 0x0D, 0x0F, 0x13, 0x16
TAG_SUBRANGE, TAG_BASE, TAG_CONSTANT, TAG_VARIABLE = 0x21, 0x24, 0x27, 0x34
AT_LOCATION, AT_NAME, AT_BYTE_SIZE, AT_UPPER_BOUND = 0x02, 0x03, 0x0B, 0x2F
AT_CONST_VALUE, AT_COUNT, AT_MEMBER_LOCATION, AT_TYPE = 0x1C, 0x37, 0x38, 0x49
KEPT_TAGS = frozenset({TAG_ARRAY, TAG_MEMBER, TAG_POINTER, TAG_STRUCT, TAG_TYPEDEF, TAG_SUBRANGE, TAG_BASE,
                       TAG_CONSTANT, TAG_VARIABLE})
WANTED_ATTRS = frozenset({AT_LOCATION, AT_NAME, AT_BYTE_SIZE, AT_UPPER_BOUND, AT_CONST_VALUE, AT_COUNT,
                          AT_MEMBER_LOCATION, AT_TYPE})
OP_ADDR, OP_PLUS_UCONST = 0x03, 0x23
FORM_IMPLICIT_CONST = 0x21


@dataclass
class Die:
    """One kept entry: a type, a member, a constant or a variable."""

    tag: int
    name: str = ""
    size: int | None = None        # DW_AT_byte_size
    type: int | None = None        # offset of its type's entry in .debug_info
    offset: int | None = None      # a member's offset in its struct
    count: int | None = None       # an array's length (from its subrange)
    value: int | None = None       # a constant's value; a variable's address
    children: list[Die] = field(default_factory=list)


@dataclass
class DwarfTypes:
    """What ``parse_dwarf`` kept: entries by offset, and the named ones by name."""

    dies: dict[int, Die]
    names: dict[str, int]          # first entry of each name (a struct before its typedef)

    def constant(self, name: str) -> int | None:
        die = self.dies.get(self.names.get(name, -1))
        return die.value if die is not None and die.tag == TAG_CONSTANT else None

    def variable(self, name: str) -> tuple[int, int] | None:
        """(address, type's entry offset) of a global variable, or None."""
        die = self.dies.get(self.names.get(name, -1))
        if die is None or die.tag != TAG_VARIABLE or die.value is None or die.type is None:
            return None
        return die.value, die.type

    def resolve(self, ref: int | None) -> Die | None:
        """The entry ``ref`` points at, typedefs followed (Go names every struct through one)."""
        for _ in range(16):
            die = self.dies.get(ref if ref is not None else -1)
            if die is None or die.tag != TAG_TYPEDEF:
                return die
            ref = die.type
        return None

    def size_of(self, ref: int | None) -> int | None:
        die = self.resolve(ref)
        if die is None:
            return None
        if die.size is None and die.tag == TAG_ARRAY and die.count is not None:
            element = self.size_of(die.type)
            return None if element is None else element * die.count
        return die.size

    def field(self, ref: int | None, path: str) -> tuple[int, int | None] | None:
        """(offset, type) of ``path`` ("pages.summary", "stats") inside the struct ``ref``; None
        where a name along it is missing (another Go release named it otherwise)."""
        offset = 0
        for part in path.split("."):
            die = self.resolve(ref)
            if die is None or die.tag != TAG_STRUCT:
                return None
            member = next((m for m in die.children if m.name == part and m.offset is not None), None)
            if member is None:
                return None
            offset += member.offset or 0
            ref = member.type
        return offset, ref


@dataclass
class _Abbrev:
    tag: int
    children: bool
    attrs: list[tuple[int, int, int]]   # (attribute, form, implicit constant)


class _Cursor:
    """A position in bytes, with DWARF's integers (LEB128 and fixed)."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def fixed(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.data):
            raise MalformedInput("DWARF", f"cut short at {self.pos:#x}")
        value: int = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return value

    def uleb(self) -> int:
        result, shift, data = 0, 0, self.data
        while True:
            if self.pos >= len(data) or shift > 70:
                raise MalformedInput("DWARF", f"bad LEB128 at {self.pos:#x}")
            byte = data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return result

    def sleb(self) -> int:
        start = self.pos
        value = self.uleb()
        bits = 7 * (self.pos - start)
        return value - (1 << bits) if value & (1 << (bits - 1)) else value

    def cstring(self) -> bytes:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise MalformedInput("DWARF", f"unterminated string at {self.pos:#x}")
        text = self.data[self.pos:end]
        self.pos = end + 1
        return text

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise MalformedInput("DWARF", f"block of {size} bytes at {self.pos:#x} outside the section")
        block = self.data[self.pos:self.pos + size]
        self.pos += size
        return block


def parse_abbrevs(data: bytes, offset: int) -> dict[int, _Abbrev]:
    """The abbreviation table at ``offset`` of .debug_abbrev."""
    cur, table = _Cursor(data, offset), dict[int, _Abbrev]()
    while True:
        code = cur.uleb()
        if code == 0:
            return table
        tag, children = cur.uleb(), cur.fixed("B", 1) != 0
        attrs = []
        while True:
            attr, form = cur.uleb(), cur.uleb()
            if attr == 0 and form == 0:
                break
            attrs.append((attr, form, cur.sleb() if form == FORM_IMPLICIT_CONST else 0))
        table[code] = _Abbrev(tag, children, attrs)


@dataclass
class _Unit:
    start: int          # offset of the unit's header in .debug_info
    version: int
    offset_size: int    # 4 (32-bit DWARF) or 8
    addr_size: int


# fixed-size forms: (struct format, size); the rest are read in _value
_FIXED = {0x05: ("<H", 2), 0x06: ("<I", 4), 0x07: ("<Q", 8), 0x0B: ("B", 1), 0x0C: ("B", 1), 0x11: ("B", 1),
          0x12: ("<H", 2), 0x13: ("<I", 4), 0x14: ("<Q", 8), 0x1C: ("<I", 4), 0x20: ("<Q", 8), 0x24: ("<Q", 8),
          0x25: ("B", 1), 0x26: ("<H", 2), 0x28: ("<I", 4), 0x29: ("B", 1), 0x2A: ("<H", 2), 0x2C: ("<I", 4)}
_CU_REFS = frozenset({0x11, 0x12, 0x13, 0x14, 0x15})   # ref1..ref8, ref_udata: relative to the unit
_ULEB = frozenset({0x0F, 0x15, 0x1A, 0x1B, 0x22, 0x23})
_STRINGS = Callable[[int, int], str]


def _value(cur: _Cursor, form: int, unit: _Unit, implicit: int, strings: _STRINGS) -> int | str | bytes | None:
    """One attribute's value: an int, a name, a block (bytes), or None for what is not kept."""
    if form in _FIXED:
        fmt, size = _FIXED[form]
        value = cur.fixed(fmt, size)
        return value + unit.start if form in _CU_REFS else value
    if form in _ULEB:
        value = cur.uleb()
        return value + unit.start if form in _CU_REFS else value
    if form == 0x08:                                   # string
        return cur.cstring().decode("utf-8", "replace")
    if form in (0x0E, 0x1F, 0x1D):                     # strp, line_strp, strp_sup
        return strings(form, cur.fixed("<I" if unit.offset_size == 4 else "<Q", unit.offset_size))
    if form in (0x10, 0x17):                           # ref_addr, sec_offset
        size = unit.addr_size if form == 0x10 and unit.version == 2 else unit.offset_size
        return cur.fixed("<I" if size == 4 else "<Q", size)
    if form == 0x01:                                   # addr
        return cur.fixed("<I" if unit.addr_size == 4 else "<Q", unit.addr_size)
    if form == 0x0D:
        return cur.sleb()
    if form in (0x09, 0x18):                           # block, exprloc
        return cur.take(cur.uleb())
    if form in (0x0A, 0x03, 0x04):                     # block1, block2, block4
        return cur.take(cur.fixed(*{0x0A: ("B", 1), 0x03: ("<H", 2), 0x04: ("<I", 4)}[form]))
    if form == 0x19:                                   # flag_present
        return 1
    if form == FORM_IMPLICIT_CONST:
        return implicit
    if form in (0x27, 0x2B):                           # strx3, addrx3
        cur.take(3)
        return None
    if form == 0x1E:                                   # data16
        cur.take(16)
        return None
    if form == 0x16:                                   # indirect
        return _value(cur, cur.uleb(), unit, implicit, strings)
    raise MalformedInput("DWARF", f"unknown form {form:#x} at {cur.pos:#x}")


def _block_value(block: bytes, op: int, addr_size: int) -> int | None:
    """The operand of a one-operation expression (DW_OP_addr for a variable's address,
    DW_OP_plus_uconst for an old-style member offset)."""
    if not block or block[0] != op:
        return None
    if op == OP_ADDR:
        return int.from_bytes(block[1:1 + addr_size], "little") if len(block) >= 1 + addr_size else None
    cur = _Cursor(block, 1)
    return cur.uleb()


def _make_die(tag: int, values: dict[int, int | str | bytes | None], addr_size: int) -> Die:
    def number(attr: int) -> int | None:
        value = values.get(attr)
        return value if isinstance(value, int) else None

    name = values.get(AT_NAME)
    die = Die(tag, name if isinstance(name, str) else "", number(AT_BYTE_SIZE), number(AT_TYPE))
    location = values.get(AT_MEMBER_LOCATION)
    die.offset = (location if isinstance(location, int) else
                  _block_value(location, OP_PLUS_UCONST, addr_size) if isinstance(location, bytes) else None)
    count, upper = number(AT_COUNT), number(AT_UPPER_BOUND)
    die.count = count if count is not None else (upper + 1 if upper is not None else None)
    if tag == TAG_CONSTANT:
        die.value = number(AT_CONST_VALUE)
    elif tag == TAG_VARIABLE and isinstance(values.get(AT_LOCATION), bytes):
        die.value = _block_value(values[AT_LOCATION], OP_ADDR, addr_size)  # type: ignore[arg-type]
    return die


def _unit_header(cur: _Cursor) -> tuple[_Unit, int, int]:
    """The unit at the cursor: (unit, its abbreviations' offset, the offset past it)."""
    start = cur.pos
    length, offset_size = cur.fixed("<I", 4), 4
    if length == 0xFFFFFFFF:
        length, offset_size = cur.fixed("<Q", 8), 8
    end = cur.pos + length
    if end > len(cur.data) or length < 2:
        raise MalformedInput("DWARF", f"unit at {start:#x} of {length} bytes runs past the section")
    version = cur.fixed("<H", 2)
    if not 2 <= version <= 5:
        raise MalformedInput("DWARF", f"unit at {start:#x}: version {version}")
    if version >= 5:
        unit_type, addr_size = cur.fixed("B", 1), cur.fixed("B", 1)
        abbrev = cur.fixed("<I" if offset_size == 4 else "<Q", offset_size)
        cur.pos += {1: 0, 3: 0, 2: 12, 6: 12, 4: 8, 5: 8}.get(unit_type, 0)  # type unit / skeleton extras
    else:
        abbrev = cur.fixed("<I" if offset_size == 4 else "<Q", offset_size)
        addr_size = cur.fixed("B", 1)
    if addr_size not in (4, 8):
        raise MalformedInput("DWARF", f"unit at {start:#x}: address size {addr_size}")
    return _Unit(start, version, offset_size, addr_size), abbrev, end


def _walk_unit(cur: _Cursor, end: int, unit: _Unit, abbrevs: dict[int, _Abbrev], strings: _STRINGS,
               out: DwarfTypes) -> None:
    """Every entry of one unit: kept ones into ``out``, members and subranges onto their parent."""
    stack: list[Die | None] = []
    while cur.pos < end:
        here = cur.pos
        code = cur.uleb()
        if code == 0:
            if stack:
                stack.pop()
            continue
        abbrev = abbrevs.get(code)
        if abbrev is None:
            raise MalformedInput("DWARF", f"entry at {here:#x}: no abbreviation {code}")
        keep = abbrev.tag in KEPT_TAGS
        values: dict[int, int | str | bytes | None] = {}
        for attr, form, implicit in abbrev.attrs:
            value = _value(cur, form, unit, implicit, strings)
            if keep and attr in WANTED_ATTRS:
                values[attr] = value
        die = _make_die(abbrev.tag, values, unit.addr_size) if keep else None
        parent = stack[-1] if stack else None
        if die is not None:
            if die.tag in (TAG_MEMBER, TAG_SUBRANGE):
                if parent is not None:
                    parent.children.append(die)
                    if die.tag == TAG_SUBRANGE and die.count is not None:
                        parent.count = die.count
            else:
                out.dies[here] = die
                if die.name and len(stack) <= 1:
                    out.names.setdefault(die.name, here)
        if abbrev.children:
            stack.append(die)


def _unit_name(cur: _Cursor, unit: _Unit, abbrevs: dict[int, _Abbrev], strings: _STRINGS) -> str:
    """The name of the unit whose first entry is at the cursor (the cursor left where it was)."""
    peek = _Cursor(cur.data, cur.pos)
    abbrev = abbrevs.get(peek.uleb())
    for attr, form, implicit in abbrev.attrs if abbrev is not None else []:
        value = _value(peek, form, unit, implicit, strings)
        if attr == AT_NAME and isinstance(value, str):
            return value
    return ""


def parse_dwarf(info: bytes, abbrev: bytes, debug_str: bytes = b"", line_str: bytes = b"",
                units: Callable[[str], bool] | None = None) -> DwarfTypes:
    """The types, constants and variables of ``.debug_info`` (decompressed): of every unit, or of
    those whose name ``units`` accepts (Go puts every type in one unit named "runtime": a program
    of thousands of packages is read in its runtime's units only)."""
    def strings(form: int, offset: int) -> str:
        table = line_str if form == 0x1F else debug_str
        end = table.find(b"\0", offset)
        return table[offset:end].decode("utf-8", "replace") if 0 <= offset < len(table) and end >= 0 else ""

    out = DwarfTypes({}, {})
    tables: dict[int, dict[int, _Abbrev]] = {}
    cur = _Cursor(info)
    try:
        while cur.pos < len(info):
            unit, abbrev_at, end = _unit_header(cur)
            if abbrev_at not in tables:
                tables[abbrev_at] = parse_abbrevs(abbrev, abbrev_at)
            if units is None or units(_unit_name(cur, unit, tables[abbrev_at], strings)):
                _walk_unit(cur, end, unit, tables[abbrev_at], strings, out)
            cur.pos = end
    except (struct.error, IndexError, KeyError, RecursionError) as exc:  # belt and braces: said as malformed
        raise MalformedInput("DWARF", f"{type(exc).__name__} at {cur.pos:#x}") from None
    return out
