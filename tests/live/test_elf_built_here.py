"""The ELF reader on what this machine builds and installs: a program compiled here (cc), an i386
object (gcc -m32), and the allocators' libraries apt installed (jemalloc, tcmalloc, mimalloc). The
reader on captured and damaged files, and on this machine's libc: tests/unit/test_parsers.py."""
import os

import pytest


def test_elf_defines_or_imports_a_symbol(tmp_path):
    """libc defines malloc; a program that calls it imports it (even when dladdr names the program)."""
    import subprocess

    from memgap.sources.elf import defines_symbol

    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    assert defines_symbol(libc, "malloc") is True
    assert defines_symbol(libc, "no_such_symbol_here") is None
    src, exe = tmp_path / "p.c", tmp_path / "p"
    src.write_text("#include <stdlib.h>\nvoid *(*f)(size_t) = malloc;\nint main(void){ return f(1) == 0; }\n")
    subprocess.run(["cc", "-no-pie", "-o", str(exe), str(src)], check=True)
    assert defines_symbol(str(exe), "malloc") is False
    assert defines_symbol(str(tmp_path / "missing"), "malloc") is None
    (tmp_path / "junk").write_bytes(b"\x7fELF\x02\x01" + bytes(range(256)) * 3)
    assert defines_symbol(str(tmp_path / "junk"), "malloc") is None


def test_elf_reader_reads_32_bit_files(tmp_path):
    """ELFCLASS32: an i386 object file compiled here (its .symtab), with a prefixed jemalloc API."""
    import subprocess

    from memgap.allocators.detect import families, signs
    from memgap.sources.elf import SymbolQuery, read_elf

    src, obj = tmp_path / "m32.c", tmp_path / "m32.o"
    src.write_text("int je_mallctl(void) { return 0; }\nint je_mallocx(void) { return 1; }\n"
                   "extern int elsewhere(void);\nint use(void) { return elsewhere(); }\n")
    if subprocess.run(["gcc", "-m32", "-c", "-o", str(obj), str(src)], capture_output=True).returncode:
        pytest.skip("gcc cannot compile for i386 here")
    info = read_elf(str(obj), signs().query)
    assert info.defined == {"je_mallctl", "je_mallocx"} and info.has_symtab and not info.dynamic  # only those asked
    assert families(info) == [("jemalloc", "je_", ["je_mallctl", "je_mallocx"])]
    other = read_elf(str(obj), SymbolQuery(names=frozenset({"use", "elsewhere"})))
    assert other.defined == {"use"} and not other.imported  # elsewhere: undefined, but in .symtab, not .dynsym


def test_elf_reader_on_the_allocators_libraries():
    """Each allocator's library read for its symbols: the API families and prefixes memgap tells them by."""
    from memgap.allocators.detect import families, signs
    from memgap.sources.elf import read_elf

    for path, name in (("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "jemalloc"),
                       ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "tcmalloc"),
                       ("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2", "mimalloc")):
        if os.path.exists(path):
            info = read_elf(path, signs().query)
            assert "malloc" in info.exported and "libc.so.6" in info.needed
            assert [f[:2] for f in families(info)] == [(name, "")], families(info)
