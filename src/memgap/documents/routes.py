"""The routes a figure is read by, named once: every document, table and finding says its figures'
route in these words (``inspect --deep`` puts them side by side)."""
from __future__ import annotations

OUTSIDE = "outside"                   # /proc only: the process is never stopped
MALLOC_INFO = "gdb malloc_info"       # glibc's own report, written inside the process through gdb
IN_PROCESS = "gdb in-process"         # memgap.snapshot() run inside a Python process through gdb
MALLCTL = "gdb mallctl"               # jemalloc's counters, its mallctl called through gdb
TCMALLOC = "gdb MallocExtension"      # tcmalloc's properties
MIMALLOC = "gdb mi_process_info"      # mimalloc's figures
