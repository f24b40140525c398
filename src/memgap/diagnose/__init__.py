"""Diagnose: findings from a snapshot's layers, each with the figures that say it.

``findings`` weighs the layers of a process and of a tree (leak, allocator retention, pymalloc
fragmentation, shared memory...); ``allocators`` reads jemalloc's and tcmalloc's own figures;
the runtimes' findings live with their readers (``memgap.runtimes``).
"""
