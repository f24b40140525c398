"""The ELF facts kept on disk between memgap's runs (memgap.sources.elf_cache), on copies of this machine's
libraries in the test's own folder: read once per version of a file, read again once it changes or is
replaced, a damaged or foreign entry never trusted, a folder that is not ours and closed refused.

Each test points memgap's private folders at its tmp_path (``tempfile.gettempdir``) and forgets what
this process read, so what it finds can only come from the disk or the file."""
import json
import os
import shutil
import tempfile
import threading

import pytest

from memgap.allocators.detect import families, signs
from memgap.errors import MalformedInput
from memgap.sources import elf_cache
from memgap.sources.elf import forget_elf_files, read_elf

LIB = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture
def here(monkeypatch, tmp_path):
    """(the folder the facts go to, a copy of this machine's libc)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(temporary))
    forget_elf_files()
    libc = tmp_path / "libc.so.6"
    shutil.copy(f"{LIB}/libc.so.6", libc)
    yield temporary / f"memgap-elf-{os.getuid()}", libc
    forget_elf_files()


def entries(folder):
    return sorted(p for p in folder.iterdir() if p.suffix == ".json") if folder.is_dir() else []


def forge(entry, **facts):
    """Rewrite a kept entry's facts, the file and the question left as they were: a reader that uses
    the entry says what it says, one that reads the library says what the library does."""
    kept = json.loads(entry.read_text())
    kept["facts"].update(facts)
    entry.write_text(json.dumps(kept))


def test_an_unchanged_file_is_read_from_what_was_kept(here):
    folder, libc = here
    first = read_elf(str(libc), signs().query)
    (entry,) = entries(folder)
    st = os.stat(libc)
    assert entry.name == f"{st.st_dev:x}-{st.st_ino:x}-{signs().query.fingerprint}.json"
    kept = json.loads(entry.read_text())
    assert kept["file"] == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    assert os.stat(folder).st_mode & 0o777 == 0o700 and os.stat(entry).st_mode & 0o777 == 0o600
    assert entry.stat().st_size < 4096   # the allocator-relevant facts only
    forget_elf_files()
    assert read_elf(str(libc), signs().query) == first   # from disk, as read
    forge(entry, defined=["je_mallctl", "je_mallocx", "malloc"])
    forget_elf_files()
    assert [f[:2] for f in families(read_elf(str(libc), signs().query))] == [("jemalloc", "je_")]


def test_a_changed_or_replaced_file_is_read_again(here):
    folder, libc = here
    read_elf(str(libc), signs().query)
    (entry,) = entries(folder)
    forge(entry, defined=["je_mallctl", "je_mallocx"])
    with open(libc, "ab") as fh:   # changed in place: same inode, another size, mtime and ctime
        fh.write(b"\0")
    forget_elf_files()
    assert [f[:2] for f in families(read_elf(str(libc), signs().query))] == [("glibc", "")]
    assert json.loads(entry.read_text())["file"][2] == os.stat(libc).st_size   # written anew
    replacement = libc.parent / "new"
    shutil.copy(f"{LIB}/libjemalloc.so.2" if os.path.exists(f"{LIB}/libjemalloc.so.2") else "/bin/true",
                replacement)
    os.replace(replacement, libc)   # replaced: another inode at the same path
    info = read_elf(str(libc), signs().query)
    assert "gnu_get_libc_version" not in info.defined
    assert len(entries(folder)) == 2


@pytest.mark.parametrize("damage", ["garbage", "cut", "not an object", "other format", "other file", "other question",
                                    "facts of the wrong type", "empty"])
def test_a_damaged_or_foreign_entry_is_ignored_and_written_anew(here, damage):
    folder, libc = here
    truth = read_elf(str(libc), signs().query)
    (entry,) = entries(folder)
    kept = json.loads(entry.read_text())
    text = entry.read_text()
    if damage == "garbage":
        text = "\x00\xff{{{"
    elif damage == "cut":
        text = text[:len(text) // 2]
    elif damage == "not an object":
        text = "[1, 2, 3]"
    elif damage == "empty":
        text = ""
    else:
        key, value = {"other format": ("format", 0), "other file": ("file", [1, 2, 3, 4, 5]),
                      "other question": ("question", "0" * 16),
                      "facts of the wrong type": ("facts", {**kept["facts"], "defined": "malloc"})}[damage]
        text = json.dumps({**kept, key: value, "facts": {**kept["facts"], "defined": ["je_mallctl", "je_mallocx"]}}
                          if key != "facts" else {**kept, key: value})
    entry.write_text(text)
    forget_elf_files()
    assert read_elf(str(libc), signs().query) == truth
    assert json.loads(entry.read_text()) == kept   # written anew


def test_a_damaged_library_stays_damaged_until_it_changes(here):
    folder, libc = here
    libc.write_bytes(libc.read_bytes()[:4096])
    with pytest.raises(MalformedInput, match=f"malformed ELF file: {libc}: ") as first:
        read_elf(str(libc), signs().query)
    (entry,) = entries(folder)
    assert "malformed" in json.loads(entry.read_text())["facts"]
    forget_elf_files()
    with pytest.raises(MalformedInput) as again:
        read_elf(str(libc), signs().query)
    assert str(again.value) == str(first.value)


@pytest.mark.parametrize("folder_is", ["open to others", "another user's", "a link"])
def test_a_folder_not_ours_and_closed_is_refused(here, tmp_path, monkeypatch, folder_is):
    """As for native builds: nothing kept or read there, and every look still reads the libraries.
    Another user's folder: this process made it, then takes another user id (``os.getuid``)."""
    folder, libc = here
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if folder_is == "a link":
        folder.symlink_to(elsewhere)
    elif folder_is == "open to others":
        folder.mkdir(mode=0o700)
        os.chmod(folder, 0o777)
    else:
        uid = os.getuid() + 1
        folder = folder.parent / f"memgap-elf-{uid}"
        folder.mkdir(mode=0o700)
        monkeypatch.setattr(os, "getuid", lambda: uid)
    first = read_elf(str(libc), signs().query)
    assert not list(elsewhere.iterdir()) and (folder_is == "a link" or not list(folder.iterdir()))
    st = os.stat(libc)
    assert elf_cache.load(elf_cache.file_identity(st), signs().query.fingerprint) is None
    forget_elf_files()
    assert read_elf(str(libc), signs().query) == first


def test_writers_at_once_leave_a_whole_entry(monkeypatch, tmp_path):
    """Threads of this process stand for memgap processes: each entry read back is one writer's, whole."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    identity = (1, 2, 3, 4, 5)
    seen, done = [], threading.Event()

    def write(n):
        for _ in range(50):
            elf_cache.store(identity, "f" * 16, {"writer": n, "names": [f"name{n}"] * 200})

    def read():
        while not done.is_set():
            seen.append(elf_cache.load(identity, "f" * 16))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    done.set()
    reader.join()
    last = elf_cache.load(identity, "f" * 16)
    assert last is not None and last["names"] == [f"name{last['writer']}"] * 200
    assert all(s is None or s["names"] == [f"name{s['writer']}"] * 200 for s in seen)
    assert not [n for n in os.listdir(tmp_path / f"memgap-elf-{os.getuid()}") if n.endswith(".tmp")]
