"""JSON as a type, for the values that are any JSON at all: a document or a recording's line as parsed,
before its reader checks it; a ``to_dict()``'s result on its way to ``json.dumps``; the JSON Schemas
memgap generates. A value whose keys memgap knows and reads has a TypedDict or a dataclass instead.

``JsonValue`` is recursive: null, a boolean, a number, a string, an array of JSON values or an object
whose keys are strings and whose values are JSON values. Arrays and objects are read-only views here
(``Sequence``, ``Mapping``), so that a ``list[int]`` or a ``dict[str, str]`` is one too; ``JsonObject``,
the object at the top of a document, is a ``dict`` its writer fills key by key.

At run time the names are markers (mypy reads the aliases): the documents' reader
(memgap.documents.fields) takes a ``JsonValue`` field as it is, once checked to be JSON's kind of value,
and the schema generator (memgap.documents.schema) leaves it open.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from typing import TypeAlias

    JsonValue: TypeAlias = bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
    JsonObject: TypeAlias = dict[str, JsonValue]
else:
    class JsonValue:
        """Run-time marker of the alias above (a recursive alias cannot be evaluated at run time)."""

    JsonObject = dict[str, JsonValue]

JSON_KINDS = (type(None), bool, int, float, str, list, tuple, dict)  # what json.dumps writes as JSON


def shaped(value: Mapping[str, object] | Sequence[Mapping[str, object]] | None) -> JsonValue:
    """A TypedDict (or a list of them) as the JSON it is: memgap's TypedDicts name JSON's kinds only, but
    mypy takes a TypedDict for a ``Mapping[str, object]`` alone, never for a JSON object."""
    return cast("JsonValue", value)


def shaped_object(value: Mapping[str, object]) -> JsonObject:
    """A TypedDict as the JSON object it is (see ``shaped``), to be written on."""
    return cast("JsonObject", value)
