"""musl's malloc (mallocng): memgap reads none of its figures; detection tells it by its library's path
(its libc is named libc.so too) and says so, and its memory stays under other anonymous.
"""
from __future__ import annotations

from memgap.allocators.base import AllocatorReader, AllocatorSigns


class Musl(AllocatorReader):
    name = "musl"
    signs = AllocatorSigns(path_word="musl", libraries=("ld-musl", "libc.musl"))


READER = Musl()
