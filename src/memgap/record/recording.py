"""An append-only recording: one JSON object per line, flushed as it is written,
so a run killed midway keeps every line written before the kill.
"""
from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator

from memgap.errors import InputTooLarge, MalformedInput, MemgapError, UsageError
from memgap.record.envnames import RECORD_DIR_ENV

# Light to import: `memgap run` makes its recording before its command starts (json, shutil, tempfile
# and typing are loaded where they are used, after it has)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

    from memgap.documents.json_value import JsonObject

SAMPLES_FILE = "samples.jsonl"  # a run's folder: the recorder's header, samples, reads and end
CREATE_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_new(path: str) -> int:
    """A new file, 0600, opened for appending: never one that is there already, nor where a link
    points (O_EXCL refuses any name that exists, a planted link included). FileExistsError if taken."""
    return os.open(path, CREATE_FLAGS, 0o600)


def own_private_folder(found: os.stat_result) -> bool:
    """A folder of this user's that no one else may write in (lstat's: a link is no folder)."""
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid() and not found.st_mode & 0o022


def private_folder(path: str) -> None:
    """``path`` made 0700 where it is not there; where it is, it must be this user's own folder, no
    link, that no one else may write in (MemgapError): memgap (often root) and its agent write in it."""
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    except OSError as exc:
        raise MemgapError(f"cannot make the recording folder {path}: {exc.strerror or exc}") from None
    if not own_private_folder(os.lstat(path)):
        raise MemgapError(f"{path} is not a folder only you may write in: memgap records only into its own")


def new_temporary_folder(prefix: str) -> str:
    """A new folder, 0700, named ``prefix`` and random letters, in the system's temporary folder (TMPDIR,
    TEMP or TMP, else /tmp), as tempfile.mkdtemp makes one; tempfile's own where that cannot be made there
    (it looks further: /var/tmp, the working folder). Without importing tempfile (and random, shutil and
    their compressors: 7 ms before `memgap run`'s command starts)."""
    base = next((os.environ[name] for name in ("TMPDIR", "TEMP", "TMP") if os.environ.get(name)), "/tmp")
    for _ in range(100):  # tempfile.TMP_MAX tries, as mkdtemp
        path = os.path.join(os.path.abspath(base), prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
        except OSError:
            break
    import tempfile

    return tempfile.mkdtemp(prefix=prefix)


def make_record_folder(path: str, earlier: Callable[[list[str]], bool], kind: str, flag: str) -> bool:
    """Make a recording's folder, 0700, for this recording alone (``run --json``'s FILE.d, ``lab
    --dir``): memgap (often root) and its agent write into it, and a folder another user can write
    in lets them plant links to root's files. A folder already there is taken only where it is this
    user's own, no link, and no one else may write in it; and then only empty, or holding an earlier
    recording of the same kind (``earlier(names)``), which goes (the two would be read back as one),
    as the file of a --json given again does. Anything else is a UsageError naming ``kind`` and the
    option to change (``flag``). Returns whether an earlier recording was replaced."""
    try:
        found: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        found = None
    names: list[str] = []
    if found is not None:
        if not own_private_folder(found):
            raise UsageError(f"{path} exists and is not a folder only you may write in: memgap records only "
                             f"into a folder it makes; choose another {flag}")
        names = os.listdir(path)
        if names and not earlier(names):
            raise UsageError(f"{path} exists and is not {kind}: choose another {flag}")
        import shutil

        shutil.rmtree(path)
    try:
        os.mkdir(path, 0o700)
    except OSError as exc:
        raise MemgapError(f"cannot make the recording folder {path}: {exc.strerror or exc}") from None
    return bool(names)


class RecordingWriter:
    """Appends events to a JSON-lines file it makes (``create_new``): each event a whole line in one
    write(2) to a file opened O_APPEND, so that threads, and processes writing ``beside`` it, never
    mix two lines, and a kill cuts at most the last one."""

    def __init__(self, path: str, fd: int | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd = create_new(path) if fd is None else fd

    def beside(self) -> RecordingWriter:
        """A writer of the same file for another process (memgap's reader: memgap.record.outside)."""
        return RecordingWriter(self.path, os.dup(self._fd))  # the same open file: appended to, never replaced

    def write(self, event: JsonObject) -> None:
        import json  # here: a recording is made before the command starts, written once it has

        line = (json.dumps(event, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.path}: written after it was closed")
            done = os.write(self._fd, line)
            while done < len(line):  # a regular file takes it whole; a short write (disk full) goes on
                done += os.write(self._fd, line[done:])

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


LINE_LIMIT = 16 << 20  # characters: a recording's longest line (a snapshot without its regions) is far below


def open_recorded(path: str) -> TextIO:
    """A file of a recording, opened to read: a regular file, never through a link (one planted in the
    folder would show another file's text as the recording's), never blocking (a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        why = "a link, not followed: memgap reads only the files it wrote" if exc.errno == errno.ELOOP else \
            exc.strerror or str(exc)
        raise MalformedInput(path, why) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise MalformedInput(path, "not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, encoding="utf-8")


def read_events(path: str) -> Iterator[JsonObject]:
    """Events of a recording, read a line at a time (memory: one line, LINE_LIMIT at most), each a JSON
    object its reader takes apart; a last line cut short by a kill is skipped, any other bad line (one
    that is not an object among them) is an error."""
    from memgap.documents.fields import parse_json  # read back only: a recording is written before the command runs

    with open_recorded(path) as fh:
        number = 0
        while True:
            number += 1
            line = _line(fh, path, number)
            if not line:
                return
            if not line.strip():
                continue
            try:
                event = parse_json(line, f"{path}, line {number}")
            except InputTooLarge:
                raise
            except MalformedInput:
                if line.endswith("\n") and _more(fh, path, number):
                    raise
                return  # the final line, interrupted mid-write
            if not isinstance(event, dict):
                raise MalformedInput(f"{path}, line {number}", f"a JSON {type(event).__name__}, not an event")
            yield event


def _line(fh: TextIO, path: str, number: int) -> str:
    try:
        line = fh.readline(LINE_LIMIT + 1)
    except ValueError as exc:  # not UTF-8
        raise MalformedInput(f"{path}, line {number}", f"not text memgap wrote ({exc})") from None
    if len(line) > LINE_LIMIT:
        raise InputTooLarge(f"{path}, line {number}",
                            f"a line over {LINE_LIMIT >> 20} MiB: memgap writes none so long")
    return line


def _more(fh: TextIO, path: str, number: int) -> bool:
    """Whether anything but blank lines follows (a bad line followed by more is no line cut short)."""
    while True:
        number += 1
        line = _line(fh, path, number)
        if not line:
            return False
        if line.strip():
            return True


def child_recording_path(directory: str, pid: int | None = None) -> str:
    return os.path.join(directory, f"process-{pid or os.getpid()}.jsonl")


class ProcessFile:
    """This process's own file in the recording folder named by MEMGAP_RECORD_DIR
    (``process-PID{suffix}.jsonl``), opened on first use; a forked child opens its own."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix
        self._writer: RecordingWriter | None = None
        self._pid = 0

    def writer(self) -> RecordingWriter | None:
        """The writer, or None when no recording is under way."""
        directory = os.environ.get(RECORD_DIR_ENV)
        if not directory:
            return None
        if self._writer is None or self._pid != os.getpid():
            self._writer, self._pid = _new_process_file(directory, self.suffix), os.getpid()
        return self._writer


def _new_process_file(directory: str, suffix: str) -> RecordingWriter | None:
    """process-PID{suffix}.jsonl, made new; where that name is taken (a program this process ran
    before an exec wrote it; a PID reused), process-PID{suffix}-N.jsonl. None where none can be made:
    the program goes on unrecorded, never failing for it."""
    stem = child_recording_path(directory)[:-len(".jsonl")] + suffix
    for n in range(1, 9):
        try:
            return RecordingWriter(f"{stem}{'' if n == 1 else f'-{n}'}.jsonl")
        except FileExistsError:
            continue
        except OSError:
            return None
    return None
