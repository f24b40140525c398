"""The ELF facts memgap read, kept on disk between its runs: an unchanged library is read once per machine.

One small JSON file per (file, question) in memgap's private folder ``$TMPDIR/memgap-elf-UID``
(memgap.sources.private: made 0700, refused where it is not this user's or others may write it;
then nothing is kept and every run reads the files). Its name is the file's device and inode with
the question's fingerprint; inside, the file's whole identity (device, inode, size, mtime and ctime
in ns: a file changed or replaced on disk has another) and the fingerprint again, so an entry is used
only for the very file and question it was written for. An entry cut short, damaged, too big or not
a plain file of ours is ignored, and the next read of the file writes it anew. Entries are written
whole to a file of their own, then renamed over the name: two memgap processes writing at once
leave one of their entries, never a mix.

The facts are a JSON object given by the caller (memgap.sources.elf); this module only keeps them.
"""
from __future__ import annotations

import json
import os
import stat
from typing import Any

from memgap.errors import MemgapError
from memgap.sources.private import private_folder

FORMAT = 1            # bump when the facts' shape or the way they are read changes: older entries are then not used
MAX_ENTRY = 1 << 20   # a real entry is a few KiB: more is not one of ours

Identity = tuple[int, int, int, int, int]   # device, inode, size, mtime_ns, ctime_ns


def file_identity(st: os.stat_result) -> Identity:
    """What tells one version of a file from another: replaced (inode), rewritten (size, mtime, ctime)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def folder() -> str | None:
    """memgap's private folder for the facts, made if missing; None where there is none of ours."""
    try:
        return private_folder("elf")
    except (OSError, MemgapError):
        return None  # no folder of ours to keep facts in: every run reads the files


def _entry_path(identity: Identity, fingerprint: str) -> str | None:
    kept_in = folder()
    return None if kept_in is None else os.path.join(kept_in, f"{identity[0]:x}-{identity[1]:x}-{fingerprint}.json")


def load(identity: Identity, fingerprint: str) -> dict[str, Any] | None:
    """The facts kept for this version of the file and this question, or None (none kept, or not usable)."""
    path = _entry_path(identity, fingerprint)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > MAX_ENTRY:
            return None
        entry = json.loads(os.read(fd, MAX_ENTRY + 1))
    except (OSError, ValueError):  # ValueError: cut short or not JSON (UnicodeDecodeError too)
        return None
    finally:
        os.close(fd)
    if (not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("file") != list(identity)
            or entry.get("question") != fingerprint or not isinstance(entry.get("facts"), dict)):
        return None
    facts: dict[str, Any] = entry["facts"]
    return facts


def store(identity: Identity, fingerprint: str, facts: dict[str, Any]) -> None:
    """Keep ``facts`` for this version of the file and this question (nothing where no folder is ours)."""
    path = _entry_path(identity, fingerprint)
    if path is None:
        return
    data = json.dumps({"format": FORMAT, "file": list(identity), "question": fingerprint, "facts": facts},
                      separators=(",", ":")).encode()
    temporary = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temporary, path)  # atomic: a reader sees the old entry or this one, whole
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
