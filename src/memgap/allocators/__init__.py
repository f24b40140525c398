"""Allocators: the ones memgap knows and the variants the lab and the remedies build from them.

``catalog`` (each allocator's library, package, option variables and preloading) and
``variants`` (``--variant`` specs parsed, their libraries found, their environment built).
"""
