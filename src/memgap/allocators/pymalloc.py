"""pymalloc, CPython's small-object allocator on top of the C one: its arenas found from outside by
their pool headers (memgap.sources.anon_objects, memgap.sources.pymalloc_pools), its own statistics in
the process (memgap.sources.pymalloc); its layers are python_objects and pymalloc_free.
"""
from __future__ import annotations

from memgap.allocators.base import AllocatorReader

OWNER = "pymalloc-arena"


class Pymalloc(AllocatorReader):
    name = "pymalloc"
    owner = OWNER


READER = Pymalloc()
