"""mimalloc: nothing from outside or from the agent (it counts no allocated bytes in a release build);
through gdb, mi_process_info's committed bytes read and mi_collect called (memgap.sources.mimalloc_gdb),
its committed memory one layer of its own (allocator_held).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from memgap.allocators.base import AllocatorReader, unread_note

if TYPE_CHECKING:
    from memgap.sources.allocator import AllocatorDetection


class Mimalloc(AllocatorReader):
    name = "mimalloc"

    def outside_note(self, detection: AllocatorDetection) -> str:
        return unread_note(detection, "mi_process_info", False)


READER = Mimalloc()
