"""Inside: what is read or done inside a running process, on request only.

``gdb`` attaches (``inspect --deep``, ``--trim``) and reads the allocator's own figures
(glibc's malloc_info, jemalloc's mallctl, tcmalloc's and mimalloc's statistics), or runs memgap's
snapshot inside a Python process (each allocator's part of it is its reader's, in
``memgap.allocators``); ``trust`` says which reading wins under tracemalloc; ``pymalloc_release``
gives pymalloc's empty pools back in this process. memgap's preloaded agent (``memgap.agent``) is the other way in.
"""
