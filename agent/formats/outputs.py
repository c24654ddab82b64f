"""Opening output files so that no input, and no earlier result, is ever lost.

* A regular file is written under a temporary name in its own directory
  (``.NAME.XXXXXX.partial``) and renamed into place only when complete, so a
  failed or interrupted command leaves the old file as it was.  A process
  killed outright leaves the ``.partial`` file, which is as readable as
  anything it had written.
* An output that is the same file as an input (the same path, a symlink, a
  hard link), or as another output, is refused before anything is opened.
* A FIFO waits at most :data:`FIFO_TIMEOUT_S` for a reader; a character
  device (``/dev/null``, a terminal) is written directly.
* A write that fails (a full disk, an I/O error) does not end the command: the
  error is kept, later writes are dropped, the partial file is removed at the
  end, and :attr:`Output.failure` says what happened, so that the command can
  still print its summary before it exits with status 2.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import time
from typing import IO, Callable, Iterable

from ..errors import UserError

#: How long opening a FIFO waits for a reader.
FIFO_TIMEOUT_S = 10.0
BUFFER_BYTES = 1 << 20


#: The tables a recording keeps beside it, named TRACE + suffix (the
#: mappings :mod:`.sidetable` holds, the energy :mod:`.energytable` holds):
#: read with the recording and written with it, so on the list of its files.
MAPPINGS_SUFFIX = ".mappings.jsonl"
ENERGY_SUFFIX = ".energy.jsonl"
RECORDING_SUFFIXES = (MAPPINGS_SUFFIX, ENERGY_SUFFIX)


class Recording(str):
    """A path that names a recording (a trace): as an input or an output of
    :func:`check_outputs` it stands for the trace and its side tables."""

    SUFFIXES = RECORDING_SUFFIXES
    KIND = "recording"


class Database(str):
    """A path that names a SQLite database (the phase catalogue): it stands
    for the database and the journals SQLite keeps beside it, which it
    reads back and deletes (an output there is lost, or read as the journal)."""

    SUFFIXES = ("-wal", "-shm", "-journal")
    KIND = "database"


def files_of(path: str) -> list[tuple[str, str | None]]:
    """The files ``path`` stands for, each with the recording (or database)
    it is a side table of (None for ``path`` itself).  A side table is looked
    for beside the name given and beside the file a link names, so both are
    listed."""
    files = [(str(path), None)]
    if isinstance(path, (Recording, Database)):
        tables = {os.path.realpath(whole + suffix): whole + suffix
                  for whole in (str(path), os.path.realpath(path)) for suffix in path.SUFFIXES}
        files += [(table, path) for table in tables.values()]
    return files


def check_folder(folder: str, outputs: Iterable[str | None] = (),
                 inputs: Iterable[str | None] = ()) -> None:
    """Refuse, before it is made, a folder for outputs (a report's) where an
    input, an output or a side table of either is."""
    for other, other_table_of in (f for p in inputs if p for f in files_of(p)):
        if _same_file(folder, other):
            raise UserError(_is_input(folder, other, None, other_table_of))
    for other, other_table_of in (f for p in outputs if p for f in files_of(p)):
        if _same_file(folder, other):
            raise UserError(_is_output(folder, other, None, other_table_of))


def check_outputs(outputs: Iterable[str | None], inputs: Iterable[str | None] = (),
                  folders: Iterable[str] = ()) -> None:
    """Refuse outputs that would overwrite an input or each other, or that
    cannot be files.  Every file the command reads or writes is on the one
    list, a recording's side tables among them (:class:`Recording`).  Opens
    nothing for writing, and makes no folder: a file in one of ``folders``
    that does not exist yet (the command makes it once all is checked) is
    checked for all but its folder."""
    to_make = {os.path.realpath(f) for f in folders if f and not os.path.isdir(f)}
    read = [f for p in inputs if p for f in files_of(p)]
    written: list[tuple[str, str | None]] = []
    for path in (p for p in outputs if p):
        for file, table_of in files_of(path):
            for other, other_table_of in read:
                if _same_file(file, other):
                    raise UserError(_is_input(file, other, table_of, other_table_of))
            for other, other_table_of in written:
                if _same_file(file, other):
                    raise UserError(_is_output(file, other, table_of, other_table_of))
            if table_of is None and os.path.dirname(os.path.realpath(file)) not in to_make:
                _check_kind(file)
            written.append((file, table_of))


def _is_input(file: str, other: str, table_of: str | None, other_table_of: str | None) -> str:
    if other_table_of is not None:
        return (f"{file}: is the side table of the input {other_table_of}; writing it would "
                f"break that {other_table_of.KIND}: give another output name")
    if table_of is not None:
        return (f"{table_of}: its side table {file} would overwrite the input {other}: "
                f"give the recording another name")
    return f"{file}: is the input {other}; writing it would destroy it: give another output name"


def _is_output(file: str, other: str, table_of: str | None, other_table_of: str | None) -> str:
    if table_of is None and other_table_of is None:
        return f"{file}: named as two outputs ({other}); give each its own file"
    trace = other_table_of or table_of
    return (f"{file}: is where the side table of {trace} goes, which this command writes "
            f"too: give each output its own name")


def check_ipc_endpoint(endpoint: str, option: str) -> None:
    """Refuse a ZeroMQ ``ipc://PATH`` to bind where PATH exists and is not a
    socket: libzmq unlinks whatever is at PATH before it binds.  Other
    endpoints (tcp, an abstract ``ipc://@NAME``) name no file."""
    scheme, _, path = endpoint.partition("://")
    if scheme != "ipc" or not path or path.startswith("@"):
        return
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UserError(f"{option} {endpoint}: cannot use {path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise UserError(f"{option} {endpoint}: {path} exists and is not a socket, and binding "
                        f"would delete it: give another path")
    if _listening(path):
        raise UserError(f"{option} {endpoint}: another process is serving on {path} (a "
                        f"daemon or proxy still running), and binding would take it over: "
                        f"stop it first, or give another path")


def _listening(path: str) -> bool:
    """Whether a process accepts connections on the Unix socket at ``path``
    (one left behind by a process that ended refuses them)."""
    import socket
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _check_kind(path: str) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        parent = os.path.dirname(os.path.realpath(path)) or "."
        if not os.path.isdir(parent):
            raise UserError(f"cannot write {path}: no directory {parent}; create it first") from None
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UserError(f"cannot write {path}: permission denied in {parent}") from None
        return
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"cannot write {path}: is a directory; give a file name")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        raise UserError(f"cannot write {path}: not a regular file, FIFO or character device")
    if stat.S_ISREG(st.st_mode):    # written beside it and renamed over it: its folder must let us
        parent = os.path.dirname(os.path.realpath(path)) or "."
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UserError(f"cannot write {path}: permission denied in {parent}")


class Output:
    """One output file.  :attr:`stream` is a file object whose failed writes
    are kept in :attr:`error` instead of raised.  Finish with :meth:`close`
    (commit) or :meth:`discard`."""

    def __init__(self, path: str, binary: bool = False, fifo_timeout: float | None = None,
                 temp: str | None = None):
        self.path = path
        self.error: OSError | None = None
        self._final: str | None = None        # where the temporary file goes when done
        self._temp: str | None = None
        if temp is None:
            fd = self._open(path, FIFO_TIMEOUT_S if fifo_timeout is None else fifo_timeout)
        else:
            fd = self._open_temp(path, temp)
        raw = io.open(fd, "wb", buffering=BUFFER_BYTES)
        inner = raw if binary else io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape")
        self.stream = _Guarded(inner, self)

    def _open(self, path: str, fifo_timeout: float) -> int:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror}") from None
        if st is not None and stat.S_ISFIFO(st.st_mode):
            return _open_fifo(path, fifo_timeout)
        if st is not None and stat.S_ISCHR(st.st_mode):
            return _os_open(path, os.O_WRONLY)
        self._final = os.path.realpath(path)
        directory, name = os.path.split(self._final)
        import tempfile     # not at import: it costs a command's start-up 2 ms
        try:
            fd, self._temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=directory)
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror}") from None
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
        if st is not None:
            _keep_owner(fd, st)
        os.fchmod(fd, mode)
        return fd

    def _open_temp(self, path: str, temp: str) -> int:
        """A regular file under the given temporary name (one that must not exist)."""
        self._final = os.path.realpath(path)
        fd = _os_open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 & ~_umask(), what=path)
        self._temp = temp
        return fd

    @property
    def temp_path(self) -> str | None:
        """The temporary file the output is written to until it is complete."""
        return self._temp

    @property
    def failure(self) -> str | None:
        """One line saying why the output is incomplete, or None."""
        if self.error is None:
            return None
        what = os.strerror(self.error.errno) if self.error.errno else str(self.error)
        gone = " (the partial file was removed" + (
            f"; {self.path} is as it was before)" if self._final else ")")
        return f"cannot write {self.path}: {what}{gone if self._final else ''}"

    def note(self, exc: OSError) -> None:
        if self.error is None:
            self.error = exc

    def close(self) -> None:
        """Flush and, for a regular file, rename it into place; if a write
        failed, remove the partial file instead (see :attr:`failure`)."""
        self.finish()
        self.commit()

    def finish(self) -> None:
        """Flush everything to disk, without putting the file in place yet."""
        self.stream.close()

    def commit(self) -> None:
        """Rename the finished file into place, or remove it if a write failed."""
        if self._temp is None:
            return
        if self.error is not None:
            self.discard()
            return
        try:
            os.replace(self._temp, self._final)
        except OSError as exc:
            self.note(exc)
            self.discard()
            return
        self._temp = None

    def keep_first(self, size: int) -> bool:
        """After a failed write, keep the first ``size`` bytes (the part known
        complete) under the output's name instead of removing them; False if
        that could not be done either (the partial file is then removed)."""
        self.stream.close()
        if self._temp is None:
            return False
        try:
            os.truncate(self._temp, size)
            os.replace(self._temp, self._final)
        except OSError:
            self.discard()
            return False
        self._temp = None
        return True

    def discard(self) -> None:
        """Drop the output: a regular file's temporary file is removed and
        whatever was at the path stays."""
        self.stream.close()
        if self._temp is not None:
            try:
                os.unlink(self._temp)
            except FileNotFoundError:
                pass
            self._temp = None

    def __enter__(self) -> "Output":
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


def write_all_or_none(files: Iterable[tuple[str, bool, Callable[[IO], object]]]) -> None:
    """Write several files as one: ``(path, binary, write)`` each, ``write``
    filling the file object it is given.  All are written and finished before
    any is put in place, so a set that cannot be whole leaves the old files as
    they were (a UserError names what failed).  The caller checks the paths
    first (:func:`check_outputs`)."""
    outputs: list[Output] = []
    try:
        for path, binary, write in files:
            outputs.append(Output(path, binary=binary))
            write(outputs[-1].stream)
        for out in outputs:
            out.finish()
    except BaseException:
        for out in outputs:
            out.discard()
        raise
    failures = [out.failure for out in outputs if out.failure]
    if failures:
        for out in outputs:
            out.discard()
        raise UserError("; ".join(failures))
    for out in outputs:
        out.commit()


def open_output(path: str, inputs: Iterable[str | None] = (), binary: bool = False) -> Output:
    """Check ``path`` against ``inputs`` (see :func:`check_outputs`) and open it."""
    check_outputs([path], inputs)
    return Output(path, binary=binary)


class _Guarded(io.RawIOBase):
    """A file object over ``inner`` whose failing writes are noted on
    ``owner`` and then dropped, along with every later one."""

    def __init__(self, inner, owner: Output):
        self._inner, self._owner = inner, owner
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        n = len(data)
        if self._owner.error is None:
            try:
                self._inner.write(data)
            except OSError as exc:
                self._owner.note(exc)
        self._position += n
        return n

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        if self._owner.error is None and not self._inner.closed:
            try:
                self._inner.flush()
            except OSError as exc:
                self._owner.note(exc)

    def close(self) -> None:
        if self._inner.closed:
            return
        self.flush()
        try:
            if self._owner.error is None and self._owner._temp is not None:
                os.fsync(self._inner.fileno())
        except OSError as exc:
            self._owner.note(exc)
        try:
            self._inner.close()
        except OSError as exc:          # the buffered rest could not be written
            self._owner.note(exc)
            try:
                self._inner.close()
            except OSError:
                pass
        super().close()

    @property
    def closed(self) -> bool:
        return self._inner.closed


def _os_open(path: str, flags: int, mode: int = 0o777, what: str | None = None) -> int:
    try:
        return os.open(path, flags | os.O_CLOEXEC, mode)
    except OSError as exc:
        raise UserError(f"cannot write {what or path}: {exc.strerror}") from None


def _open_fifo(path: str, timeout: float) -> int:
    """Open a FIFO for writing without blocking forever: opening one with no
    reader fails with ENXIO when non-blocking, so retry until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise UserError(f"cannot write {path}: {exc.strerror}") from None
            if time.monotonic() >= deadline:
                raise UserError(f"cannot write {path}: a FIFO that no process read within "
                                f"{timeout:g} s; start its reader first") from None
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return fd


def _keep_owner(fd: int, old: os.stat_result) -> None:
    """The new file takes the owner of the one it replaces where we may give
    it (root may: a user's file rewritten by root stays the user's)."""
    if (old.st_uid, old.st_gid) == (os.geteuid(), os.getegid()):
        return
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except PermissionError:
        pass        # a user replacing what the folder lets them replace: theirs now, as with mv


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
