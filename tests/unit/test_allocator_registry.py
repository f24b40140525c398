"""The allocator readers' registry and typed detection, where nothing is started: one reader per module
(and one for an allocator memgap reads nothing of), and every snapshot's allocator in tests/fixtures
written back the same. The readers on real programs under their allocators:
tests/live/test_allocators_contract.py."""
import json

from memgap.allocators.registry import MODULES, all_readers, reader_for
from memgap.documents.allocator import AllocatorInfo


def test_the_registry_holds_one_reader_per_module():
    readers = all_readers()
    assert list(readers) == list(MODULES)
    assert all(reader_for(name) is reader and reader.name == name for name, reader in readers.items())
    unknown = reader_for("musl")  # an allocator detection names that memgap reads nothing of
    assert unknown.name == "musl" and unknown.mappings is not None and not unknown.deep_key


def test_the_allocators_json_is_the_same_read_back():
    """Snapshot.allocator typed (AllocatorInfo): every snapshot's allocator in tests/fixtures, read and
    written again, is the same keys in the same order with the same values."""
    import glob
    import os

    from conftest import HERE

    seen = 0

    def walk(value):
        nonlocal seen
        if isinstance(value, dict):
            found = value.get("allocator")
            if isinstance(found, dict) and "name" in found:
                again = AllocatorInfo.from_dict(found).to_dict()
                assert json.dumps(again) == json.dumps(found)
                seen += 1
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for path in glob.glob(os.path.join(HERE, "fixtures", "**", "*.json*"), recursive=True):
        with open(path) as fh:
            text = fh.read()
        for chunk in text.splitlines() if path.endswith(".jsonl") else [text]:
            try:
                walk(json.loads(chunk))
            except ValueError:
                continue
    assert seen >= 10
    with_deep = {"name": "jemalloc", "library": "x", "how": "y", "others": [], "found": [],
                 "jemalloc_gdb": {"allocated": 1}, "a_later_key": [1]}
    assert json.dumps(AllocatorInfo.from_dict(with_deep).to_dict()) == json.dumps(with_deep)
