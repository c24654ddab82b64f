"""Model-specific registers from /dev/cpu/N/msr (or LLNL's msr-safe).

One 8-byte ``pread`` at offset = MSR address reads one register of one CPU.
The device is opened read-only: phasewatch never writes an MSR.  Where
msr-safe's batch device exists, one ioctl reads every register of every
watched CPU.

:class:`MsrReader` fills a preallocated ``(cpus, registers)`` uint64 array
per call, so a sampler tick creates no Python object per value that outlives
the call.  A value that cannot be read (EIO: the register does not exist, or
an allowlist refuses it) is stored as ``MISSING`` and counted; a CPU whose
device goes away (offline: ENXIO, ENODEV, ENOENT) is dropped and counted.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
from pathlib import Path

import numpy as np

from phasewatch.core.batch import MISSING
from phasewatch.core.registers import ALL_COLUMNS, REGISTERS
from phasewatch.errors import MissingDevice, MissingPrivilege, UserError

from .ioctl import IOC_READ, IOC_WRITE, ioc
from .kernel_modules import load_hint
from .tick_loop import KIND_BINARY

DEFAULT_PATH = "/dev/cpu/{cpu}/msr"
MSR_SAFE_PATH = "/dev/cpu/{cpu}/msr_safe"
MSR_SAFE_BATCH = "/dev/cpu/msr_batch"
MSR_SAFE_VERSION = "/dev/cpu/msr_safe_version"

OFFLINE_ERRNOS = (errno.ENXIO, errno.ENODEV, errno.ENOENT, errno.EBADF)


def open_device(path: str) -> int:
    """A read-only descriptor for one CPU's MSR device, or a one-line error.
    Opened without blocking: a FIFO at the path would wait for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise MissingDevice(f"no {path}: {load_hint('msr')}") from None
    except PermissionError:
        raise MissingPrivilege(
            f"cannot open {path}: reading MSRs needs root or CAP_SYS_RAWIO "
            f"(setcap cap_sys_rawio+ep on the interpreter, or run as root)") from None
    except OSError as exc:
        raise MissingDevice(f"cannot open {path}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISDIR(mode) or stat.S_ISSOCK(mode):
        os.close(fd)
        raise MissingDevice(f"{path}: not an MSR device (a FIFO, folder or socket): give the "
                            f"device path with --msr-path, e.g. {DEFAULT_PATH}")
    os.set_blocking(fd, True)
    return fd


def device_path(template: str, cpu: int) -> str:
    """``template`` with ``{cpu}`` replaced by the CPU number."""
    try:
        return template.format(cpu=cpu)
    except (KeyError, IndexError, ValueError):
        raise UserError(f"--msr-path {template!r}: the only field it may hold is {{cpu}}, "
                        f"e.g. {DEFAULT_PATH}") from None


def msr_safe_present(cpu: int = 0) -> bool:
    return os.path.exists(MSR_SAFE_PATH.format(cpu=cpu)) and os.path.exists(MSR_SAFE_BATCH)


def read_registers(cpu: int, path_template: str) -> tuple[dict[str, object], str | None, str]:
    """Every register of :data:`REGISTERS` on ``cpu``: name -> raw value,
    or name -> OSError; plus the reason the device did not open, if it did not."""
    path = device_path(path_template, cpu)
    if path_template == DEFAULT_PATH and msr_safe_present(cpu):
        path = MSR_SAFE_PATH.format(cpu=cpu)
    try:
        fd = open_device(path)
    except UserError as exc:
        return {}, str(exc), path
    values: dict[str, object] = {}
    try:
        for name, address in REGISTERS.items():
            try:
                data = os.pread(fd, 8, address)
                values[name] = int.from_bytes(data, "little") if len(data) == 8 else \
                    OSError(errno.EIO, "short read")
            except OSError as exc:
                values[name] = exc
    finally:
        os.close(fd)
    return values, None, path


MSR_SAFE_ALLOWLIST = "/dev/cpu/msr_allowlist"


def refused(path: str, address: int | None = None) -> str:
    """The advice for an EACCES from msr-safe: its allowlist lacks the register."""
    which = f"MSR {address:#x}" if address is not None else "a register"
    return f"{path} refuses {which}: add it to msr-safe's allowlist ({MSR_SAFE_ALLOWLIST})"


def register_failure(name: str, value: OSError, path: str) -> str:
    address = REGISTERS[name]
    if value.errno == errno.EACCES:
        return refused(path, address)
    return f"MSR {address:#x} not readable on this CPU ({os.strerror(value.errno or errno.EIO)})"


class MsrReader:
    """Reads ``columns`` (names from :data:`REGISTERS`) of ``cpus`` into a
    ``(len(cpus), len(columns))`` uint64 array.

    ``path``: device path template with ``{cpu}``.  ``pread`` is the read
    function (``os.pread``); tests substitute one that fails on purpose.
    """

    kind = "msr"

    def __init__(self, cpus, columns=ALL_COLUMNS, path: str = DEFAULT_PATH, pread=os.pread):
        self.cpus = list(cpus)
        self.columns = tuple(columns)
        unknown = [c for c in self.columns if c not in REGISTERS]
        if unknown:
            raise UserError(f"unknown MSR column(s) {', '.join(unknown)}: use {', '.join(REGISTERS)}")
        self.path = path
        self._pread = pread
        self._fds = [open_device(device_path(path, c)) for c in self.cpus]
        self.alive = np.ones(len(self.cpus), bool)
        self.read_errors = 0
        self.lost_cpus: list[int] = []
        self._plan()

    def _plan(self) -> None:
        """The (fd, address) list of the fast path: every live CPU's registers."""
        self._rows = np.flatnonzero(self.alive)
        addresses = [REGISTERS[c] for c in self.columns]
        self._ops = [(self._fds[r], a) for r in self._rows for a in addresses]

    def read(self, out: np.ndarray) -> None:
        """Fill ``out`` (shape (cpus, columns), uint64) with raw values."""
        pread, ops = self._pread, self._ops
        try:
            raw = b"".join([pread(fd, 8, a) for fd, a in ops])
        except OSError:
            raw = b""
        if ops and len(raw) == 8 * len(ops):
            values = np.frombuffer(raw, "<u8").reshape(len(self._rows), len(self.columns))
            if len(self._rows) == len(self.cpus):
                out[:] = values
            else:
                out[:] = MISSING
                out[self._rows] = values
            return
        self._read_slowly(out)

    def ops(self) -> list[tuple[int, int, int]] | None:
        """(fd, kind, offset) of every live CPU's registers, CPU by CPU, for the
        compiled tick loop; None where reads go through a substituted ``pread``."""
        if self._pread is not os.pread:
            return None
        return [(fd, KIND_BINARY, address) for fd, address in self._ops]

    def scatter(self, values: np.ndarray, errnos: np.ndarray, out: np.ndarray) -> None:
        """The compiled loop's ``values`` and ``errnos`` (ticks, ops) of
        :meth:`ops` into ``out`` (ticks, cpus, columns); a failed read is
        MISSING and counted, and a CPU gone offline is dropped."""
        shape = (len(values), len(self._rows), len(self.columns))
        got = np.where(errnos != 0, MISSING, values).reshape(shape)
        if len(self._rows) == len(self.cpus):
            out[:] = got
        else:
            out[:] = MISSING
            out[:, self._rows] = got
        failed = errnos.reshape(shape)
        if not failed.any():
            return
        offline = np.isin(failed, OFFLINE_ERRNOS).any(axis=(0, 2))
        self.read_errors += int(((failed != 0) & ~np.isin(failed, OFFLINE_ERRNOS)).sum())
        for row in self._rows[offline]:
            self._lose(int(row))

    def _read_slowly(self, out: np.ndarray) -> None:
        """One register at a time, so that one failure costs one value."""
        for row, fd in enumerate(self._fds):
            for col, name in enumerate(self.columns):
                out[row, col] = self._read_one(row, fd, REGISTERS[name])

    def _read_one(self, row: int, fd: int, address: int):
        if not self.alive[row]:
            return MISSING
        try:
            data = self._pread(fd, 8, address)
        except OSError as exc:
            if exc.errno in OFFLINE_ERRNOS:
                self._lose(row)
            else:
                self.read_errors += 1
            return MISSING
        if len(data) != 8:
            self.read_errors += 1
            return MISSING
        return int.from_bytes(data, "little")

    def _lose(self, row: int) -> None:
        self.alive[row] = False
        self.lost_cpus.append(self.cpus[row])
        self._plan()

    def stats(self) -> dict[str, int]:
        return {"errors": self.read_errors, "cpus_lost": len(self.lost_cpus)}

    def close(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []


# --- msr-safe batch ioctl ------------------------------------------------------

class _BatchOp(ctypes.Structure):
    # struct msr_batch_op (msr-safe's msr_safe.h)
    _fields_ = [("cpu", ctypes.c_uint16), ("isrdmsr", ctypes.c_uint16),
                ("err", ctypes.c_int32), ("msr", ctypes.c_uint32),
                ("msrdata", ctypes.c_uint64), ("wmask", ctypes.c_uint64)]


class _BatchArray(ctypes.Structure):
    # struct msr_batch_array; ``version`` sits in what older releases left as padding
    _fields_ = [("numops", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("ops", ctypes.POINTER(_BatchOp))]


X86_IOC_MSR_BATCH = ioc(IOC_READ | IOC_WRITE, ord("c"), 0xA2, ctypes.sizeof(_BatchArray))


def msr_safe_version(path: str = MSR_SAFE_VERSION) -> int:
    """msr-safe's version as MAJOR<<16 | MINOR<<8 | PATCH (2.0.0 if unreadable)."""
    try:
        text = Path(path).read_text().split()[0]
        major, minor, patch = (int(x) for x in text.split(".")[:3])
        return major << 16 | minor << 8 | patch
    except (OSError, ValueError, IndexError):
        return 2 << 16


class MsrSafeBatchReader:
    """The same interface as :class:`MsrReader`, one ioctl per call.

    The ops array is built once; only ``msrdata``/``err`` change per call and
    are viewed through numpy, so a tick allocates nothing.
    """

    kind = "msr-safe"

    def __init__(self, cpus, columns=ALL_COLUMNS, batch_path: str = MSR_SAFE_BATCH):
        self.cpus = list(cpus)
        self.columns = tuple(columns)
        self.path = batch_path
        self._fd = open_device(batch_path)
        n = len(self.cpus) * len(self.columns)
        self._ops = (_BatchOp * n)()
        for i, (cpu, col) in enumerate((c, k) for c in self.cpus for k in self.columns):
            self._ops[i].cpu, self._ops[i].isrdmsr, self._ops[i].msr = cpu, 1, REGISTERS[col]
        self._array = _BatchArray(n, msr_safe_version(), self._ops)
        view = np.frombuffer(self._ops, np.uint8).reshape(n, ctypes.sizeof(_BatchOp))
        self._data = view[:, _BatchOp.msrdata.offset:_BatchOp.msrdata.offset + 8].view("<u8")[:, 0]
        self._err = view[:, _BatchOp.err.offset:_BatchOp.err.offset + 4].view("<i4")[:, 0]
        self.alive = np.ones(len(self.cpus), bool)
        self.read_errors = 0
        self.lost_cpus: list[int] = []

    def read(self, out: np.ndarray) -> None:
        try:
            fcntl.ioctl(self._fd, X86_IOC_MSR_BATCH, self._array)
        except OSError as exc:
            if exc.errno == errno.EACCES:
                raise MissingPrivilege(refused(self.path)) from None
            if exc.errno != errno.EIO:     # EIO: some op failed; see per-op err
                raise
        flat = out.reshape(-1)
        flat[:] = self._data
        failed = self._err != 0
        if failed.any():
            flat[failed] = MISSING
            self.read_errors += int(failed.sum())

    def stats(self) -> dict[str, int]:
        return {"errors": self.read_errors, "cpus_lost": len(self.lost_cpus)}

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_reader(cpus, columns=ALL_COLUMNS, path: str = DEFAULT_PATH, pread=os.pread):
    """msr-safe's batch reader where it is installed and ``path`` is the
    default; the per-register device reader otherwise."""
    if path == DEFAULT_PATH and msr_safe_present(cpus[0] if cpus else 0):
        return MsrSafeBatchReader(cpus, columns)
    return MsrReader(cpus, columns, path, pread)
