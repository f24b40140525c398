"""Diagnose: findings from a snapshot's layers, each with the figures that say it.

``findings`` weighs the layers of a process and of a tree (leak, allocator retention, pymalloc
fragmentation, shared memory...); ``allocators`` reads jemalloc's and tcmalloc's own figures;
``floors`` holds what both weigh against (the byte floor, the share, the base a share is of);
the runtimes' findings live with their readers (``memgap.runtimes``).
"""
