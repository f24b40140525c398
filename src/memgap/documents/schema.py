"""JSON Schemas of memgap's documents, made from the same type hints that ``from_dict`` checks
(memgap.documents.fields), so the published schema and the reader cannot drift: docs/schemas/ holds
them as ``scripts/json_schemas.py`` writes them, and tests/unit/test_schemas_published.py checks both ways.

Each document class is a dataclass; a field is required where it has no default (as ``from_dict``
requires it), keys a class does not know are allowed (``from_dict`` leaves them out: a newer memgap's
additions), and a field typed ``JsonValue`` (or an object of them) is left open, as its reader leaves it. A
field marked ``flat`` in its metadata (a trim record's details) is a TypedDict whose keys sit beside the
class's own in the JSON. An int or float figure has a minimum of 0 unless its class names it in
``SIGNED``, as its reader refuses a negative one.
"""
from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any

from memgap.documents.fields import signed_fields
from memgap.documents.json_value import JsonObject, JsonValue

DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _Builder:
    """One schema: the document's class at the root, every class below it under ``$defs``."""

    def __init__(self) -> None:
        self.defs: dict[str, JsonObject] = {}

    def of(self, hint: Any, signed: bool = False) -> JsonObject:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is Any or hint is JsonValue:  # any JSON: left open
            return {}
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(a, signed) for a in args]}
        if hint is type(None):
            return {"type": "null"}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return {"enum": [m.value for m in hint]}
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            self.define(hint)
            return {"$ref": f"#/$defs/{hint.__name__}"}
        if typing.is_typeddict(hint):  # a JSON shape: its keys, those it requires
            hints = typing.get_type_hints(hint)
            keys = signed_fields(hint)
            out: JsonObject = {"type": "object", "properties": {k: self.of(v, k in keys) for k, v in hints.items()}}
            required = [k for k in hints if k in hint.__required_keys__]
            return {**out, "required": required} if required else out
        if origin is list:
            return {"type": "array", "items": self.of(args[0], signed)}
        if origin is tuple:
            return {"type": "array", "prefixItems": [self.of(a, signed) for a in args], "minItems": len(args),
                    "maxItems": len(args)}
        if origin is dict:
            return {"type": "object", "additionalProperties": self.of(args[1], signed)}
        if hint in (int, float) and not signed:
            return {"type": _SCALARS[hint], "minimum": 0}
        return {"type": _SCALARS[hint]}

    def define(self, cls: type) -> None:
        if cls.__name__ not in self.defs:
            self.defs[cls.__name__] = {}  # before its fields: a class that holds itself refers back
            self.defs[cls.__name__] = self.object(cls)

    def object(self, cls: type, schema: str | None = None) -> JsonObject:
        """A dataclass's object; a document's (``schema``: what its ``schema`` field reads) has that first."""
        hints = typing.get_type_hints(cls)
        # a field whose keys its class's to_dict writes by a pattern (``metadata["json_keys"]``; "" for keys
        # of any name, which the schema leaves open) is not a key itself
        patterns = {f.metadata["json_keys"]: self.of(hints[f.name]) for f in dataclasses.fields(cls)
                    if f.metadata.get("json_keys")}
        fields = [f for f in dataclasses.fields(cls) if "json_keys" not in f.metadata]
        required = [f.name for f in fields
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        properties: JsonObject = {"schema": {"const": schema}} if schema is not None else {}
        signed = signed_fields(cls)
        for f in fields:
            if f.metadata.get("flat"):  # a TypedDict whose keys the JSON holds beside the class's own
                flat = signed_fields(hints[f.name])
                properties.update({k: self.of(v, k in flat) for k, v in typing.get_type_hints(hints[f.name]).items()})
            else:
                properties[f.name] = self.of(hints[f.name], f.name in signed)
        out: JsonObject = {"type": "object", "properties": properties}
        if patterns:
            out["patternProperties"] = {pattern: of.get("additionalProperties", of) for pattern, of in patterns.items()}
        if required or schema is not None:
            out["required"] = ["schema", *required] if schema is not None else required
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        if doc:
            out["description"] = " ".join(doc.split())
        return out


_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}


def json_schema(cls: type, schema: str, title: str) -> JsonObject:
    """The JSON Schema of document class ``cls`` whose ``schema`` field reads ``schema``."""
    builder = _Builder()
    root = builder.object(cls, schema)
    builder.defs.pop(cls.__name__, None)
    return {"$schema": DIALECT, "$id": f"https://memgap.invalid/schemas/{schema.replace('/', '-')}.json",
            "title": title, **root, **({"$defs": dict(sorted(builder.defs.items()))} if builder.defs else {})}


def document_schemas() -> dict[str, JsonObject]:
    """Every document memgap writes, by its file name under docs/schemas/."""
    from memgap.documents.records import LAB_SCHEMA, TREE_SCHEMA, LabDocument, RunDocument, TreeDocument
    from memgap.documents.snapshot import RUN_SCHEMA, SCHEMA, Snapshot

    return {f"{name.replace('/', '-')}.json": json_schema(cls, name, title) for cls, name, title in (
        (Snapshot, SCHEMA, "memgap snapshot: one process at one instant, its RSS in layers"),
        (RunDocument, RUN_SCHEMA, "memgap run: a recorded run of a command and its processes"),
        (LabDocument, LAB_SCHEMA, "memgap lab: a workload's runs under allocator variants, and the verdict"),
        (TreeDocument, TREE_SCHEMA, "memgap tree: a process and its descendants read at one moment"),
    )}
