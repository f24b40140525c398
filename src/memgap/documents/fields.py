"""How the document classes (memgap.documents.records, memgap.documents.lab_summary) read their fields from JSON:
each value checked against its field's type, nested documents built with their own ``from_dict``;
what is missing or of the wrong type is ``MalformedInput`` naming the field. A module of its
own so that the document modules below and above one another share it without a cycle.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import sys
import types
import typing
from typing import Any

from memgap.documents.json_value import JSON_KINDS, JsonObject, JsonValue
from memgap.errors import InputTooLarge, MalformedInput

FIGURE_LIMIT = 1 << 63  # no byte count, time or PID memgap writes comes near it
STRING_LIMIT = 1 << 20  # characters: nor any string (Linux caps one argument of a command line at 128 KiB)


def _bounded_int(text: str) -> int:
    value = int(text)
    if abs(value) >= FIGURE_LIMIT:
        raise ValueError(f"the number {text[:24]}{'...' if len(text) > 24 else ''} is beyond 64 bits")
    return value


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:24]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a figure")


def _interned(pairs: list[tuple[str, JsonValue]]) -> JsonObject:
    """An object's keys interned: a recording repeats the same few keys in every line, and each line
    parsed apart would hold copies of its own (a third of a recording's memory once read)."""
    return {sys.intern(k): v for k, v in pairs}


_DECODER = json.JSONDecoder(parse_int=_bounded_int, parse_float=_finite, parse_constant=_no_constant,
                            object_pairs_hook=_interned)


def parse_json(text: str, what: str) -> Any:
    """JSON as memgap writes it, or MalformedInput saying what is wrong in one line: no NaN or
    Infinity, no number beyond 64 bits (or one that overflows a float), no nesting deeper than
    Python's parser can follow, no string over STRING_LIMIT."""
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise MalformedInput(what, "not JSON memgap wrote: nested too deep to read") from None
    except ValueError as exc:
        raise MalformedInput(what, f"not JSON memgap wrote ({exc})") from None
    if len(text) > STRING_LIMIT:  # a string is never longer than the text that holds it
        _no_long_string(value, what)
    return value


def _no_long_string(value: Any, what: str) -> None:
    """MalformedInput where a string (a key or a value) is longer than STRING_LIMIT: what memgap
    writes has none, and each one would cost every step after it (a table's wrapping) its length."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and len(item) > STRING_LIMIT:
            raise InputTooLarge(what, f"a string of {len(item) / 2**20:.1f} MiB ({item[:24]!r}...): memgap writes "
                                       f"none over {STRING_LIMIT >> 20} MiB")


_SIGNED_KEYS: dict[type, frozenset[str]] = {}


def signed_keys(shape: type, *keys: str) -> None:
    """Name the keys of a TypedDict (which holds no class attribute: no ``SIGNED``) whose figures may be
    negative."""
    _SIGNED_KEYS[shape] = frozenset(keys)


def signed_fields(cls: type) -> frozenset[str]:
    """The fields of document class ``cls`` whose figures may be negative (a difference, an exit
    status): its ``SIGNED`` (a TypedDict's: ``signed_keys``). Every other int or float figure is a byte
    count, a count, a time or a ratio, never below 0."""
    return frozenset(getattr(cls, "SIGNED", ())) | _SIGNED_KEYS.get(cls, frozenset())


def typed_value(value: Any, hint: Any, where: str, signed: bool = False) -> Any:
    """``value`` checked against the type ``hint`` (nested: lists, dicts, tuples, enums, documents);
    an int or float figure is finite and, unless ``signed``, not negative."""
    if hint is float or hint is int:  # most of a document: its figures, then its words, first
        return _figure(value, hint, where, signed)
    if hint is str or hint is bool:
        return of_type(value, hint, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if hint is JsonValue:  # any JSON: only its kind checked
        return value if isinstance(value, JSON_KINDS) else _fail(where, value, hint)
    if typing.is_typeddict(hint):
        return _json_shape(value, hint, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1:  # X | None: what is wrong with it as an X
            return typed_value(value, kinds[0], where, signed)
        for arg in kinds:
            try:
                return typed_value(value, arg, where, signed)
            except MalformedInput:
                continue
        raise _wrong(where, value, hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise MalformedInput(where, f"{value!r} is not one of {', '.join(str(m.value) for m in hint)}") from None
    if hasattr(hint, "from_dict"):
        return hint.from_dict(value, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # a part without a from_dict of its own
        return hint(**dataclass_fields(hint, value, where))
    if origin is list:  # an item's place in the list, and a value's key, in where it is: which one is wrong
        items = of_type(value, list, where)
        if _free(args[0]):  # kept as read, each only checked (a timeline's samples: no copy, no work per key)
            kind = typing.get_origin(args[0]) or args[0]
            kind = JSON_KINDS if kind is JsonValue else kind
            for i, v in enumerate(items):
                if kind is not Any and not isinstance(v, kind):
                    raise _wrong(f"{where}[{i}]", v, args[0])
            return items
        return [typed_value(v, args[0], f"{where}[{i}]", signed) for i, v in enumerate(items)]
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise _wrong(where, value, hint)
        return tuple(typed_value(v, a, where, signed) for v, a in zip(value, args, strict=True))
    if origin is dict:
        if args[1] is Any or args[1] is JsonValue:
            return of_type(value, dict, where)
        return {k: typed_value(v, args[1], f"{where}[{k!r}]", signed) for k, v in of_type(value, dict, where).items()}
    return of_type(value, hint, where)


def _figure(value: Any, hint: type, where: str, signed: bool) -> Any:
    """An int (a float also takes an int) that is no bool, finite, and not negative unless ``signed``."""
    if isinstance(value, bool) or not isinstance(value, (int, float) if hint is float else int):
        raise _wrong(where, value, hint)
    if not math.isfinite(value):  # a document built in Python, not parsed by parse_json, may hold one
        raise MalformedInput(where, f"{value!r} is not a finite number")
    if value < 0 and not signed:
        raise MalformedInput(where, f"{value!r} is negative: a byte count, count, time or ratio never is")
    return value


def _free(hint: Any) -> bool:
    """A hint whose values are taken as they are: Any or JsonValue, an object or a list of them."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    return hint is Any or hint is JsonValue or (origin is dict and args[1] in (Any, JsonValue)) or (
        origin is list and args[0] in (Any, JsonValue))


def _json_shape(value: Any, hint: Any, where: str) -> Any:
    """A TypedDict's value, a JSON object: each key the TypedDict names checked against its type (those
    it requires must be there); kept as read, its other keys and their order with it."""
    data = of_type(value, dict, where)
    signed = signed_fields(hint)
    for key, kind in _hints(hint).items():
        if key in data:
            typed_value(data[key], kind, f"{where}, field {key!r}", key in signed)  # worded as a dataclass's field
        elif key in hint.__required_keys__:
            raise MalformedInput(where, f"no field {key!r}")
    return data


def of_type(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        raise _wrong(where, value, kind)
    return value


def _wrong(where: str, value: Any, hint: Any) -> MalformedInput:
    name = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
    return MalformedInput(where, f"{type(value).__name__} where {name} belongs")


def _fail(where: str, value: Any, hint: Any) -> Any:
    raise _wrong(where, value, hint)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A class's field types, evaluated once (each evaluation compiles every annotation anew)."""
    return typing.get_type_hints(cls)


def prepare(*classes: type) -> None:
    """Evaluate ahead the field types of ``classes`` and of every dataclass and TypedDict their fields name, each
    once (``_hints`` keeps them): what reading the first document of them costs beyond its data (a run's
    document, 13 classes: 0.01 s), paid where nothing waits for it (`memgap run`: while its command runs)."""
    todo: list[Any] = list(classes)
    seen: set[Any] = set()
    while todo:
        hint = todo.pop()
        if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or typing.is_typeddict(hint)):
            if hint not in seen:
                seen.add(hint)
                todo.extend(_hints(hint).values())
        else:
            todo.extend(a for a in typing.get_args(hint) if not isinstance(a, (str, int, float, bool, type(None))))


def dataclass_fields(cls: type, data: Any, what: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword arguments of dataclass ``cls`` from ``data``: every field it has, checked;
    a field without a default must be there; keys it does not know are left out."""
    data = of_type(data, dict, what)
    hints, signed = _hints(cls), signed_fields(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name in data:
            out[f.name] = typed_value(data[f.name], hints[f.name], f"{what}, field {f.name!r}", f.name in signed)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise MalformedInput(what, f"no field {f.name!r}")
    return out


def check_schema(data: Any, family: str, current: str, what: str) -> None:
    """Refuse a document of another kind, or of a version of ``family`` this memgap does not read."""
    schema = of_type(data, dict, what).get("schema")
    if not isinstance(schema, str) or not schema.startswith(family + "/"):
        raise MalformedInput(what, f"not a {family} document (schema {schema!r})")
    if schema != current:
        raise MalformedInput(what, f"schema {schema!r}: this memgap reads {current}; "
                                   f"{_which_memgap(schema, current)} wrote it")


def _which_memgap(schema: str, current: str) -> str:
    """"a newer memgap" or "an older memgap", by the schemas' version numbers; "another tool" where
    the version is not one."""
    version, known = schema.rpartition("/")[2], current.rpartition("/")[2]
    if not (version.isascii() and version.isdigit() and known.isdigit()):
        return "another tool or version"
    return "a newer memgap" if int(version) > int(known) else "an older memgap"
