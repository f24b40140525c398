"""Explain: one snapshot of a process and its attribution.

``snapshot`` reads every source (``memgap.sources``) for one process, in it or from outside,
labels its memory map (``memgap.sources.memory_map``) and joins the regions with the allocators' figures into
layers that add up to RSS (``attribution``). ``tree`` reads a process tree at one moment and
``cow`` what each forked process copied from its parent. Nothing here stops the target: what
is read inside a process (through gdb or memgap's agent) lives in ``memgap.inside``.
"""
