"""memgap's own folders for what it keeps between runs: its native builds, the ELF facts it read.

Each is ``$TMPDIR/memgap-KIND-UID`` (``tempfile.gettempdir()``: TMPDIR, else /tmp), created mode 0700
and checked before use to be a folder (not a link) of this user closed to others: what is kept there
is trusted when read back (a library preloaded into programs, the symbols that name an allocator).
"""
from __future__ import annotations

import os
import stat

from memgap.errors import MemgapError


def private_folder(kind: str) -> str:
    """``$TMPDIR/memgap-KIND-UID``, made if missing; MemgapError where it is not ours and closed to others."""
    import tempfile  # here: a look that keeps nothing needs not load it

    path = os.path.join(tempfile.gettempdir(), f"memgap-{kind}-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise MemgapError(f"{path} is not a folder of this user closed to others: memgap will not keep or load "
                          "files in it (remove it, or set TMPDIR)")
    return path
