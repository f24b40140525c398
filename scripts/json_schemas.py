"""Write docs/schemas/: the JSON Schema of every document memgap writes, made from the type hints its
readers check (memgap.documents.schema). Run it after a document gains a field; tests/unit/test_schemas_published.py
fails until the files are what this writes.

    .venv/bin/python scripts/json_schemas.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from memgap.documents.schema import document_schemas

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "schemas")

for name, schema in document_schemas().items():
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(schema, indent=1) + "\n")
    print(f"docs/schemas/{name}")
