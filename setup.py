"""Builds memgap's native agent (a plain C shared library, LD_PRELOADed into
programs; it never imports Python) and its pymalloc pool release (loaded with
ctypes) with the system compiler. Optional: without a
compiler the install still succeeds, and memgap says what is missing when the
agent is first needed (`memgap agent` builds it then)."""
import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ACTIVATE = "memgap-activate.pth"  # starts memgap's trimmer in any Python of the environment, when asked


class BuildPyWithPth(build_py):
    """Puts memgap-activate.pth at the top of the wheel, so it lands in site-packages
    itself, where Python reads .pth files (pytest-cov ships its .pth the same way)."""

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", ACTIVATE), os.path.join(self.build_lib, ACTIVATE))

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, ACTIVATE)]


setup(cmdclass={"build_py": BuildPyWithPth}, ext_modules=[
    Extension("memgap.agent._memgap_agent", sources=["src/memgap/agent/agent.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
    # loaded into Python processes with ctypes.PyDLL (memgap.inside.pymalloc_release), not imported
    Extension("memgap.native._pools", sources=["src/memgap/native/pools.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
    # glibc's chunk headers stepped through (memgap.sources.glibc_chunks), loaded with ctypes.CDLL
    Extension("memgap.native._chunks", sources=["src/memgap/native/chunks.c"],
              extra_compile_args=["-O2", "-Wall"], optional=True),
])
