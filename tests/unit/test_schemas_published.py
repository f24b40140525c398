"""The documents' JSON Schemas (docs/schemas/, issue 25): what is published is what the readers check,
and the documents saved from earlier versions (tests/fixtures/documents/) validate and still load.
Documents written here by real runs of memgap on real programs: tests/live/test_schemas.py."""
import glob
import json
import os

import jsonschema
import pytest

from conftest import HERE

SCHEMAS = os.path.join(HERE, "..", "docs", "schemas")


SAVED = sorted(glob.glob(os.path.join(HERE, "fixtures", "documents", "*", "*.json")))


def schema_of(name):
    with open(os.path.join(SCHEMAS, name.replace("/", "-") + ".json")) as fh:
        return json.load(fh)


def valid(document, schema=None):
    """``document`` against its schema's published form (or ``schema``'s)."""
    jsonschema.Draft202012Validator(schema_of(schema or document["schema"])).validate(document)


def test_the_published_schemas_are_what_the_readers_check():
    from memgap.documents.schema import document_schemas

    made = document_schemas()
    assert sorted(made) == sorted(os.listdir(SCHEMAS)), "run scripts/json_schemas.py"
    for name, schema in made.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        with open(os.path.join(SCHEMAS, name)) as fh:
            assert json.load(fh) == schema, f"docs/schemas/{name} is stale: run scripts/json_schemas.py"


@pytest.mark.parametrize("path", SAVED, ids=[os.path.relpath(p, HERE) for p in SAVED])
def test_saved_documents_validate_and_load(path):
    from memgap.documents.records import load_document

    with open(path) as fh:
        document = json.load(fh)
    valid(document)
    load_document(document, path)
    for process in document.get("processes", []):
        for snap in process["snapshots"]:
            valid({"schema": "memgap.snapshot/1", **snap})
