"""Instruction-pointer sampling (and instruction/cycle counts) from perf_event.

One sampling event per watched CPU (per thread too, for a process target)
writes PERF_RECORD_SAMPLEs into a per-CPU ring buffer; the kernel wakes the
reader every ``wakeup`` samples, and each wake-up turns all new samples into
one column batch.  The sampling event is the cycles counter where a hardware
PMU exists and the cpu-clock software timer otherwise (virtual machines).
Where the PMU counts them, retired instructions and unhalted cycles ride along
in every sample as a PERF_SAMPLE_READ group, kept cumulative as read.

For a process target the counters are per thread (inherited into children and
new threads) and ``cpu`` says where the sample was taken; system-wide they are
per CPU.
"""

from __future__ import annotations

import errno
import mmap
import os
import select
from typing import Iterator

import numpy as np

from phasewatch.core.batch import SampleBatch
from phasewatch.errors import MissingPrivilege, UserError

from . import perf_event as pe, perf_msr, procfs
from .perf_records import TaskRecords
from .cpuinfo import base_frequency_hz, online_cpus, read_cpuinfo

SAMPLE_TYPE = pe.SAMPLE_IP | pe.SAMPLE_TID | pe.SAMPLE_TIME | pe.SAMPLE_CPU | pe.SAMPLE_PERIOD
NO_EVENT = pe.NO_EVENT

#: group members a sample can carry, in batch column order
COUNTED = ("instructions", "cycles", "tsc", "aperf", "mperf", "pperf")

#: The reader wakes every this many samples per ring, or after POLL_MS at the
#: latest (a trickle): about once a second at 1 kHz.  Each wake-up has a fixed
#: cost that dominates the agent's CPU time (benchmarks/README.md); the price
#: is that phases show up to a second after their interval ends.  POLL_MS is
#: longer than the wake-ups' spacing so that a busy ring is read once a
#: second, not twice (the timeout and the watermark drifting apart).
WAKEUP_SAMPLES = 1000
POLL_MS = 2000

#: name -> (perf type, config)
EVENTS = {
    "cycles": (pe.TYPE_HARDWARE, pe.HW_CPU_CYCLES),
    "instructions": (pe.TYPE_HARDWARE, pe.HW_INSTRUCTIONS),
    "cpu-clock": (pe.TYPE_SOFTWARE, pe.SW_CPU_CLOCK),
    "task-clock": (pe.TYPE_SOFTWARE, pe.SW_TASK_CLOCK),
}


def privilege_error(exc: OSError, what: str, **context) -> UserError:
    """The one-line message for a perf_event_open that was refused
    (``context``: what :func:`.perf_event.advice` takes)."""
    kind = MissingPrivilege if exc.errno in (errno.EACCES, errno.EPERM) else UserError
    return kind(pe.advice(exc, what, **context))


def sample_period(event: str, rate_hz: int, cycles_hz: float) -> int:
    """Period for ``rate_hz`` samples per second of CPU time."""
    if event in ("cpu-clock", "task-clock"):
        return max(1, int(round(1e9 / rate_hz)))
    return max(1, int(round(cycles_hz / rate_hz)))


def process_threads(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        raise UserError(f"no process {pid}: check the pid (ps -p {pid})") from None


class _Group:
    """The events opened on one CPU for one thread (or for all, system-wide)."""

    def __init__(self, leader: int, members: list[int]):
        self.leader = leader
        self.members = members

    @property
    def fds(self) -> list[int]:
        return [self.leader] + self.members


class PerfSource:
    """IP samples as column batches: ``t_ns, cpu, tid, ip, pid`` and, where they
    open, ``instructions, cycles`` (hardware PMU) and ``tsc, aperf, mperf,
    pperf`` (msr PMU), all cumulative as read since the source opened.

    ``pid``: a process to watch, with its threads and, by inheritance, its
    future children and threads; ``None`` watches ``cpus`` system-wide.
    ``event``: ``"auto"`` (cycles, else cpu-clock), or one of :data:`EVENTS`.
    ``counts``: attach instructions and cycles to every sample where possible.
    ``msr_pmu``: attach tsc/aperf/mperf/pperf from the kernel's msr PMU where
    it exposes them (no msr module, no CAP_SYS_RAWIO needed).
    ``enable_on_exec``: start counting when ``pid`` calls exec (a child
    started paused by :meth:`phasewatch.live.child.Child.start`).
    ``task_records``: also take, from the same rings, the records of the
    watched tree's executable mappings, execs, forks and exits
    (:mod:`.perf_records`), waiting in :attr:`records` for the sink that
    keeps the process mappings.
    ``cycles_hz`` turns ``rate_hz`` into a cycles period (default: the base
    frequency); ``period`` sets the sampling period directly instead.
    """

    def __init__(self, pid: int | None = None, cpus: list[int] | None = None,
                 rate_hz: int = 1000, wakeup: int = WAKEUP_SAMPLES, event: str = "auto",
                 counts: bool = True, msr_pmu: bool = True, include_kernel: bool = False,
                 enable_on_exec: bool = False, pages: int = 64,
                 cycles_hz: float | None = None, period: int | None = None,
                 poll_ms: int = POLL_MS, task_records: bool = False):
        if pid is None and enable_on_exec:
            raise UserError("enable_on_exec needs a process to watch: give a pid")
        self.pid = pid
        self.cpus = list(cpus) if cpus is not None else online_cpus()
        self.rate_hz = rate_hz
        self.wakeup = wakeup
        self.include_kernel = include_kernel
        self.enable_on_exec = enable_on_exec
        self.records: TaskRecords | None = None
        self._task_records = task_records and pid is not None
        self._poll_ms = poll_ms
        self._pages = pages
        self._closed = False
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._pidfd = _pidfd_of(pid)
        self._groups: list[_Group] = []
        self._specs = dict(EVENTS)
        self._value_index: dict[str, int] = {}
        self._rings: list[pe.RingBuffer] = []
        self._threads = [-1] if pid is None else (
            [pid] if enable_on_exec else process_threads(pid))
        self._ended = False
        self.not_opened: dict[str, str] = {}    # group member -> why it did not open
        self.samples = self.lost = self.throttled = 0
        self._fixed_period = period
        if cycles_hz is None:
            cycles_hz = base_frequency_hz()[0]
        try:
            self.event, self.counted = self._open(event, counts, msr_pmu, cycles_hz, pages)
        except BaseException:
            self.close()
            raise
        self.signals = ("t_ns", "cpu", "tid", "ip") + tuple(self.counted) + ("pid",)
        self.metadata = {
            "source": "perf",
            "signals": {name: "perf" for name in self.signals},
            "counter_scope": "thread" if pid is not None else "cpu",
            "sample_event": self.event,
            "sample_rate_hz": rate_hz,
            "sample_period": self._period,
            "kernel": bool(include_kernel),     # kernel mode sampled too, or user mode only
            "task_records": self._task_records,  # mappings, execs, forks from the rings
            "counted": list(self.counted),
            "not_taken": dict(self.not_opened),
            "target": f"pid {pid}" if pid is not None else "cpus " + ",".join(map(str, self.cpus)),
            "clock": "CLOCK_MONOTONIC",
        }
        self.poll_ms = self._poll_limit(pages)
        if not enable_on_exec:
            for group in self._groups:
                pe.enable(group.leader)

    def _poll_limit(self, pages: int) -> int:
        """``poll_ms``, or less where the samples of that time would fill more
        than half a ring (a high ``rate_hz``; a trickle of samples waits for it)."""
        half_ring = pages * mmap.PAGESIZE // 2 // self._dtype.itemsize
        return max(1, min(self._poll_ms, int(1000 * half_ring / self.rate_hz)))

    # --- opening ---------------------------------------------------------

    def _open(self, event: str, counts: bool, msr_pmu: bool, cycles_hz: float, pages: int):
        if event not in EVENTS and event != "auto":
            raise UserError(f"unknown sampling event {event!r}: use one of auto, {', '.join(EVENTS)}")
        candidates = ["cycles", "cpu-clock"] if event == "auto" else [event]
        for i, name in enumerate(candidates):
            self.not_opened = {}
            self._period = self._fixed_period or sample_period(name, self.rate_hz, cycles_hz)
            wanted = [m for m in ("instructions", "cycles") if m != name and counts]
            wanted += [c for c in perf_msr.available_columns()] if msr_pmu else []
            try:
                return name, self._open_all(name, wanted, pages)
            except OSError as exc:
                self._close_fds()
                if exc.errno in NO_EVENT and i + 1 < len(candidates):
                    continue
                raise privilege_error(exc, f"sampling {name}", pid=self.pid,
                                      allowed_at=self._allowed_at(kernel=self.include_kernel)
                                      ) from None
        raise AssertionError("unreachable")

    def _open_all(self, name: str, wanted: list[str], pages: int) -> tuple[str, ...]:
        """Open the sampling event on every CPU (and thread), with the group
        members that open alongside it on the first CPU."""
        self._specs = {**EVENTS, **self._msr_specs()}
        members = tuple(m for m in wanted if self._member_opens(name, m))
        dtype = self._dtype = pe.sample_dtype(self._sample_type(members), 1 + len(members))
        if self._task_records:
            self.records = TaskRecords(self._sample_type(members))
        for cpu in self.cpus:
            ring_fd = None
            for tid in self._threads:
                group = self._open_group(name, members, tid, cpu)
                self._groups.append(group)
                if ring_fd is None:
                    ring_fd = group.leader
                    self._rings.append(pe.RingBuffer(ring_fd, pages, dtype))
                else:
                    pe.set_output(group.leader, ring_fd)
        order = (name,) + members
        self._value_index = {n: order.index(n) for n in COUNTED if n in order}
        return tuple(self._value_index)

    @staticmethod
    def _msr_specs() -> dict[str, tuple[int, int]]:
        ptype = pe.pmu_type(perf_msr.PMU)
        events = pe.pmu_events(perf_msr.PMU)
        return {col: (ptype, events[ev]) for col, ev in perf_msr.EVENT_COLUMNS.items()
                if ptype is not None and ev in events}

    def _member_opens(self, name: str, member: str) -> bool:
        try:
            group = self._open_group(name, (member,), self._threads[0], self.cpus[0])
        except OSError as exc:
            # A member perf refuses (the msr PMU's counters count kernel time
            # too, which perf_event_paranoid=2 forbids a user) is left out;
            # the samples are still taken.
            if exc.errno in NO_EVENT or exc.errno in (errno.EACCES, errno.EPERM):
                self.not_opened[member] = (f"not in a group sampling {name}: " +
                                           pe.advice(exc, f"counting {member}",
                                                     virtual=read_cpuinfo().hypervisor,
                                                     allowed_at=self._allowed_at(
                                                         kernel=member in perf_msr.EVENT_COLUMNS),
                                                     pid=self.pid))
                return False
            raise
        for fd in group.fds:
            os.close(fd)
        return True

    def _allowed_at(self, kernel: bool) -> int:
        """The highest perf_event_paranoid that lets a user open our events."""
        if self.pid is None:
            return pe.ALLOWED_AT["cpu"]
        return pe.ALLOWED_AT["process" if kernel else "process-user"]

    def _sample_type(self, members) -> int:
        return SAMPLE_TYPE | (pe.SAMPLE_READ if members else 0)

    def _attr(self, name: str, leader: bool, members) -> pe.Attr:
        etype, config = self._specs[name]
        flags = {"use_clockid"}
        if self.pid is not None:
            flags.add("inherit")
        if not self.include_kernel and etype in (pe.TYPE_HARDWARE, pe.TYPE_SOFTWARE):
            flags |= {"exclude_kernel", "exclude_hv"}
        if not leader:
            return pe.Attr(etype, config, flags=flags)
        flags |= {"disabled", "sample_id_all"}
        wakeup = self.wakeup
        if self._task_records:
            flags |= {"mmap", "mmap2", "comm", "comm_exec", "task"}
            # Woken by the bytes in the ring, records too, not by samples
            # alone: a tree forking hundreds of short children a second
            # fills the ring with their records between two samples.
            flags.add("watermark")
            wakeup = self._wakeup_bytes(members)
        if self.enable_on_exec:
            flags.add("enable_on_exec")
        return pe.Attr(etype, config, sample_period=self._period,
                       sample_type=self._sample_type(members),
                       read_format=pe.FORMAT_GROUP if members else 0,
                       wakeup_events=wakeup, flags=flags)

    def _wakeup_bytes(self, members) -> int:
        """The bytes of ``wakeup`` samples, within half the ring."""
        size = pe.sample_dtype(self._sample_type(members), 1 + len(members)).itemsize
        return min(self.wakeup * size, self._pages * mmap.PAGESIZE // 2)

    def _open_group(self, name: str, members, tid: int, cpu: int) -> _Group:
        leader = pe.perf_event_open(self._attr(name, True, members), tid, cpu)
        group = _Group(leader, [])
        try:
            for member in members:
                group.members.append(
                    pe.perf_event_open(self._attr(member, False, members), tid, cpu, leader))
        except OSError:
            for fd in group.fds:
                os.close(fd)
            raise
        return group

    # --- reading ---------------------------------------------------------

    def batches(self) -> Iterator[SampleBatch]:
        poller = select.poll()
        poller.register(self._wake, select.POLLIN)
        for ring in self._rings:
            poller.register(ring.fd, select.POLLIN)
        while not self._closed and not self._ended:
            events = poller.poll(self.poll_ms)
            if any(ev & select.POLLHUP for fd, ev in events if fd != self._wake):
                self._ended = self._ended or self._target_gone()
            batch = self.read()
            if len(batch):
                yield batch

    def read(self) -> SampleBatch:
        """All samples the ring buffers hold now, as one batch in time order."""
        raws = [r for r in (ring.read_raw() for ring in self._rings) if len(r)]
        raw = raws[0] if len(raws) == 1 else np.concatenate(raws) if raws else pe._EMPTY
        others = [] if self.records is not None else None
        recs = pe.parse_samples(raw, self._dtype, self, others)
        if others:
            self.records.add(others)
        if len(raws) > 1:
            recs = recs[np.argsort(recs["time"], kind="stable")]
        self.samples += len(recs)
        cols = {"t_ns": recs["time"], "cpu": recs["cpu"], "tid": recs["tid"], "ip": recs["ip"],
                "pid": recs["pid"]}
        for name, index in self._value_index.items():
            cols[name] = recs["values"][:, index]
        return SampleBatch(cols)

    def _target_gone(self) -> bool:
        """Whether the watched process has ended: by its pidfd where the
        kernel has one (its number may already be another process's)."""
        if self.pid is None:
            return False
        if self._pidfd is not None:
            return bool(select.select([self._pidfd], [], [], 0)[0])
        return not procfs.alive(self.pid)

    def stop(self) -> None:
        """End :meth:`batches` now (an attached watch interrupted)."""
        self._ended = True
        if self._wake < 0:      # closed already
            return
        try:
            os.eventfd_write(self._wake, 1)
        except OSError:
            pass

    def take_records(self) -> list:
        """The task records read since the last call (none without ``task_records``)."""
        return self.records.take() if self.records is not None else []

    def stats(self) -> dict[str, int]:
        return {"samples": self.samples, "lost_samples": self.lost, "errors": 0,
                "throttled": self.throttled}

    def close(self) -> None:
        self._closed = True
        for ring in self._rings:
            ring.close()
        self._rings = []
        self._close_fds()
        if self._wake >= 0:
            os.close(self._wake)
            self._wake = -1
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _close_fds(self) -> None:
        for group in self._groups:
            for fd in group.fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._groups = []
        for ring in self._rings:
            ring.close()
        self._rings = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _pidfd_of(pid: int | None) -> int | None:
    try:
        return None if pid is None else os.pidfd_open(pid)
    except (AttributeError, OSError):     # gone already, or a kernel before 5.3
        return None


def interval_ends(pid: int | None = None, cpus: list[int] | None = None,
                  instructions: int = 100_000_000, event: str = "instructions",
                  **kwargs) -> PerfSource:
    """A source with one row per ``instructions`` retired instructions: the
    kernel's overflow notification, woken on every one, for interval ends.
    ``event`` lets a software clock stand in where there is no PMU."""
    return PerfSource(pid=pid, cpus=cpus, event=event, period=instructions, wakeup=1,
                      counts=False, msr_pmu=False, **kwargs)
