"""perf_event_open(2) from Python: attributes, counters and ring buffers.

The python-perf bindings that Debian ships (``import perf``) can sample, but
they neither read counters nor expose the group values of a
``PERF_SAMPLE_READ`` sample, and they build one Python object per sample.
This module opens events with the system call itself (ctypes), reads counter
groups with one ``read(2)``, and decodes a ring buffer's samples straight
into numpy columns.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import platform
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .ioctl import IOC_NONE, ioc

# include/uapi/linux/perf_event.h
TYPE_HARDWARE, TYPE_SOFTWARE, TYPE_TRACEPOINT, TYPE_HW_CACHE, TYPE_RAW = 0, 1, 2, 3, 4
HW_CPU_CYCLES, HW_INSTRUCTIONS = 0, 1
SW_CPU_CLOCK, SW_TASK_CLOCK = 0, 1

SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_READ = 1 << 0, 1 << 1, 1 << 2, 1 << 4
SAMPLE_CPU, SAMPLE_PERIOD = 1 << 7, 1 << 8
FORMAT_GROUP = 1 << 3

RECORD_MMAP, RECORD_LOST, RECORD_COMM, RECORD_EXIT = 1, 2, 3, 4
RECORD_THROTTLE, RECORD_UNTHROTTLE, RECORD_FORK, RECORD_SAMPLE, RECORD_MMAP2 = 5, 6, 7, 9, 10
MISC_COMM_EXEC = 1 << 13

FLAG_FD_CLOEXEC = 1 << 3
IOC_ENABLE = ioc(IOC_NONE, ord("$"), 0, 0)
IOC_SET_OUTPUT = ioc(IOC_NONE, ord("$"), 5, 0)

CLOCK_MONOTONIC = 1

_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "i686": 336, "riscv64": 241}

_BITS = {
    "disabled": 0, "inherit": 1, "pinned": 2, "exclusive": 3, "exclude_user": 4,
    "exclude_kernel": 5, "exclude_hv": 6, "exclude_idle": 7, "mmap": 8, "comm": 9,
    "freq": 10, "inherit_stat": 11, "enable_on_exec": 12, "task": 13, "watermark": 14,
    "sample_id_all": 18, "mmap2": 23, "comm_exec": 24, "use_clockid": 25,
}

# perf_event_attr up to sig_data (PERF_ATTR_SIZE_VER7); kernels older than the
# layout accept it as long as the fields they do not know are zero.
_ATTR = struct.Struct("<IIQQQQQIIQQQQIiQIHHIIQ")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


@dataclass
class Attr:
    """The fields of ``struct perf_event_attr`` that phasewatch sets."""

    type: int
    config: int
    sample_period: int = 0
    sample_type: int = 0
    read_format: int = 0
    wakeup_events: int = 0
    config1: int = 0
    flags: set[str] = field(default_factory=set)

    def pack(self) -> bytes:
        bits = 0
        for name in self.flags:
            bits |= 1 << _BITS[name]
        clockid = CLOCK_MONOTONIC if "use_clockid" in self.flags else 0
        return _ATTR.pack(self.type, _ATTR.size, self.config, self.sample_period,
                          self.sample_type, self.read_format, bits,
                          self.wakeup_events, 0, self.config1, 0, 0, 0, 0, clockid,
                          0, 0, 0, 0, 0, 0, 0)


def perf_event_open(attr: Attr, pid: int, cpu: int, group_fd: int = -1) -> int:
    """The new event's file descriptor; OSError with the kernel's errno otherwise."""
    nr = _NR_PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"perf_event_open: unknown machine {platform.machine()}")
    buf = ctypes.create_string_buffer(attr.pack())
    fd = _libc.syscall(ctypes.c_long(nr), buf, ctypes.c_long(pid), ctypes.c_long(cpu),
                       ctypes.c_long(group_fd), ctypes.c_long(FLAG_FD_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def enable(fd: int) -> None:
    fcntl.ioctl(fd, IOC_ENABLE, 0)


def set_output(fd: int, target_fd: int) -> None:
    """Send ``fd``'s records to ``target_fd``'s ring buffer (same CPU)."""
    fcntl.ioctl(fd, IOC_SET_OUTPUT, target_fd)


def read_group(fd: int, n: int) -> np.ndarray:
    """The ``n`` values of a FORMAT_GROUP leader, as one read(2)."""
    raw = os.read(fd, 8 * (n + 1))
    return np.frombuffer(raw, "<u8", count=n, offset=8)


#: errnos meaning "this event does not exist here" (no hardware PMU, no such PMU event)
NO_EVENT = (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL)


#: The highest perf_event_paranoid that lets a user open an event: CPU-wide,
#: on a process counting its kernel time too, on a process in user mode only.
ALLOWED_AT = {"cpu": 0, "process": 1, "process-user": 2}


def advice(exc: OSError, what: str = "perf_event_open", virtual: bool = False,
           allowed_at: int = ALLOWED_AT["process"], pid: int | None = None) -> str:
    """The one-line reason and fix for a perf_event_open that failed.
    ``allowed_at``: the highest perf_event_paranoid that allows this open;
    lowering it is advised only where it is higher.  ``pid``: the process
    watched, whose owner perf checks whatever the setting."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return refusal(what, allowed_at, pid, exc.strerror)
    if exc.errno in NO_EVENT and exc.errno != errno.EINVAL:
        if virtual:
            return "no hardware PMU: virtual machine (enable PMU passthrough in the hypervisor)"
        return "no hardware PMU: the kernel has no driver for this CPU's counters"
    if exc.errno == errno.ENOSYS:
        return "perf_event_open is not available: kernel built without CONFIG_PERF_EVENTS"
    if exc.errno == errno.ESRCH:
        return f"{what}: no such process"
    if exc.errno == errno.EMFILE:
        return f"{what}: too many open files: raise the limit (ulimit -n)"
    return f"{what}: perf_event_open failed: {exc.strerror}"


def refusal(what: str, allowed_at: int, pid: int | None, reason: str | None = None) -> str:
    level = paranoid()
    if level is None or level > allowed_at:
        return (f"perf_event_paranoid={level} forbids {what}: run as root, grant CAP_PERFMON, "
                f"or lower it (sysctl kernel.perf_event_paranoid={allowed_at})")
    owner = owner_of(pid) if pid is not None else None
    if owner is not None and owner != os.geteuid():
        return (f"{what}: pid {pid} is another user's process (uid {owner}), which perf lets "
                f"only its owner or root watch (perf_event_paranoid={level} is not what stops "
                f"it): run as that user or as root, or grant CAP_SYS_PTRACE")
    return (f"{what}: refused ({reason or os.strerror(errno.EACCES)}) though perf_event_paranoid={level} "
            f"allows it: run as root or grant CAP_PERFMON")


def owner_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def paranoid(root: str = "/proc") -> int | None:
    try:
        return int(Path(root, "sys/kernel/perf_event_paranoid").read_text())
    except (OSError, ValueError):
        return None


#: Capability bits that let a process sample kernel mode at any perf_event_paranoid
#: (the kernel's perfmon_capable()): CAP_SYS_ADMIN and CAP_PERFMON.
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38


def may_sample_kernel(root: str = "/proc") -> bool:
    """Whether this process may sample its own children in kernel mode, as
    the kernel decides it: CAP_PERFMON or CAP_SYS_ADMIN (root's), else
    perf_event_paranoid 1 or less."""
    level = paranoid(root)
    if level is not None and level <= ALLOWED_AT["process"]:
        return True
    return bool(_effective_capabilities(root) & (1 << CAP_SYS_ADMIN | 1 << CAP_PERFMON))


def _effective_capabilities(root: str) -> int:
    try:
        status = Path(root, "self/status").read_text()
    except OSError:
        return 0
    line = next((l for l in status.splitlines() if l.startswith("CapEff:")), "CapEff: 0")
    return int(line.split()[1], 16)


# --- PMUs listed in sysfs --------------------------------------------------

def pmu_type(name: str, root: str = "/sys") -> int | None:
    """The perf type number of a dynamic PMU (``msr``, ``power``), if exposed."""
    try:
        return int(Path(root, "bus/event_source/devices", name, "type").read_text())
    except (OSError, ValueError):
        return None


def pmu_events(name: str, root: str = "/sys") -> dict[str, int]:
    """``event=0xNN`` configs of a PMU's named events (``tsc``, ``aperf``...)."""
    events = {}
    directory = Path(root, "bus/event_source/devices", name, "events")
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return events
    for entry in entries:
        if "." in entry.name:      # .scale, .unit companions
            continue
        try:
            terms = dict(t.split("=", 1) for t in entry.read_text().strip().split(","))
            events[entry.name] = int(terms["event"], 0)
        except (OSError, ValueError, KeyError):
            continue
    return events


# --- Ring buffers ----------------------------------------------------------

def sample_dtype(sample_type: int, n_read: int = 0) -> np.dtype:
    """The layout of a PERF_RECORD_SAMPLE for the sample types we use."""
    fields = [("type", "<u4"), ("misc", "<u2"), ("size", "<u2")]
    if sample_type & SAMPLE_IP:
        fields.append(("ip", "<u8"))
    if sample_type & SAMPLE_TID:
        fields += [("pid", "<u4"), ("tid", "<u4")]
    if sample_type & SAMPLE_TIME:
        fields.append(("time", "<u8"))
    if sample_type & SAMPLE_CPU:
        fields += [("cpu", "<u4"), ("res", "<u4")]
    if sample_type & SAMPLE_PERIOD:
        fields.append(("period", "<u8"))
    if sample_type & SAMPLE_READ:
        fields += [("nr", "<u8"), ("values", "<u8", (n_read,))]
    return np.dtype(fields)


class RingBuffer:
    """One mmap'ed perf ring buffer; ``drain()`` returns its new samples as a
    structured numpy array and counts lost and throttle records."""

    def __init__(self, fd: int, pages: int, dtype: np.dtype):
        self.fd = fd
        self.dtype = dtype
        self.page = mmap.PAGESIZE
        self._map = mmap.mmap(fd, (1 + pages) * self.page, mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)
        self._meta = np.frombuffer(self._map, "<u8", count=self.page // 8)
        self._data = np.frombuffer(self._map, np.uint8, offset=self.page)
        self.size = pages * self.page
        self.lost = 0
        self.throttled = 0

    def read_raw(self) -> np.ndarray:
        """The bytes of all new records (whole records), handed back to the kernel."""
        head = int(self._meta[128])        # data_head, offset 1024
        tail = int(self._meta[129])        # data_tail, offset 1032
        if head == tail:
            return _EMPTY
        start, stop = tail % self.size, head % self.size
        if start < stop:
            raw = self._data[start:stop].copy()
        else:
            raw = np.concatenate((self._data[start:], self._data[:stop]))
        self._meta[129] = head             # hand the space back to the kernel
        return raw

    def close(self) -> None:
        del self._meta, self._data
        self._map.close()


_EMPTY = np.empty(0, np.uint8)


def parse_samples(raw: np.ndarray, dtype: np.dtype, counts, others: list | None = None
                  ) -> np.ndarray:
    """Whole records as bytes -> the PERF_RECORD_SAMPLEs among them, as a
    structured array; lost and throttle records are added to ``counts.lost``
    and ``counts.throttled``, and any other record is appended to ``others``
    as bytes (where given)."""
    width = dtype.itemsize
    if len(raw) % width == 0:
        recs = raw.view(dtype)
        header = recs["type"].astype(np.uint32) | (recs["size"].astype(np.uint32) << 16)
        if (header == (RECORD_SAMPLE | width << 16)).all():
            return recs
    return _walk(raw, dtype, counts, others)


def _walk(raw: np.ndarray, dtype: np.dtype, counts, others: list | None) -> np.ndarray:
    """Slow path: other records are interleaved with the samples.  Runs of
    samples are found with numpy; only the other records (few: mappings,
    forks, lost) are looked at one by one."""
    width = dtype.itemsize
    runs = []
    pos, end = 0, len(raw)
    raw = np.ascontiguousarray(raw)
    while pos + 8 <= end:
        rtype, _misc, size = struct.unpack_from("<IHH", raw, pos)
        if rtype == RECORD_SAMPLE and size == width:
            n = _sample_run(raw, pos, end, width)
            if n == 0:                  # cut short
                break
            runs.append(raw[pos:pos + n * width])
            pos += n * width
            continue
        if size == 0 or pos + size > end:
            break
        if rtype == RECORD_LOST:
            counts.lost += struct.unpack_from("<Q", raw, pos + 16)[0]
        elif rtype == RECORD_THROTTLE:
            counts.throttled += 1
        elif rtype != RECORD_SAMPLE and others is not None:
            others.append(raw[pos:pos + size].tobytes())
        pos += size
    if not runs:
        return np.empty(0, dtype)
    return np.concatenate(runs).view(dtype)


def _sample_run(raw: np.ndarray, pos: int, end: int, width: int) -> int:
    """How many whole samples of ``width`` bytes follow one another from
    ``pos``: headers checked in windows that double, so a long run costs
    about one look at each header, and a record among samples a few."""
    most = (end - pos) // width
    found, window = 0, 64
    while found < most:
        k = min(window, most - found)
        start = pos + found * width
        block = raw[start:start + k * width].reshape(k, width)[:, :8]
        header = np.ascontiguousarray(block).view("<u4")
        bad = (header[:, 0] != RECORD_SAMPLE) | ((header[:, 1] >> 16) != width)
        if bad.any():
            return found + int(np.argmax(bad))
        found += k
        window *= 2
    return found
