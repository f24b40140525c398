"""Builds memgap's native agent (a plain C shared library, LD_PRELOADed into
programs; it never imports Python) and its pymalloc pool release (loaded with
ctypes) with the system compiler. Optional: without a
compiler the install still succeeds, and memgap says what is missing when the
agent is first needed (`memgap agent` builds it then)."""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("memgap.agent._memgap_agent", sources=["src/memgap/agent/agent.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
    # loaded into Python processes with ctypes.PyDLL (memgap.pymalloc_release), not imported
    Extension("memgap.native._pools", sources=["src/memgap/native/pools.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
])
