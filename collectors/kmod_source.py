"""Samples from the phasewatch kernel module (``kmod/``), read zero-copy.

The module writes fixed-size records into one ring per watched CPU and maps
the rings read-only into the reader (ABI: ``kmod/phasewatch_uapi.h``).  This
source views each ring as a numpy structured array, copies each new span of
records out column by column, hands the span back to the module
(``PW_IOC_CONSUME``), and yields :class:`phasewatch.core.batch.SampleBatch`.

A regular file laid out as rings back to back (each with its header) stands
in for the device: the source then reads what the file holds and ends.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import select
import stat
from typing import Iterable, Iterator

import numpy as np

from phasewatch.core.batch import MISSING, SampleBatch, concat
from phasewatch.core.registers import REGISTERS

from .ioctl import IOC_NONE, IOC_READ, IOC_WRITE, ioc

DEVICE = "/dev/phasewatch"
ABI_VERSION = 1
RING_MAGIC = 0x31525750
HEADER_BYTES = 4096
CPU_WORDS = 16
REC_USER, REC_TARGET = 1 << 0, 1 << 1
CLOCKS = {0: "none", 1: "instructions", 2: "software"}

#: The allowlist order of ``enum pw_msr``: bit i of the MSR mask reads MSRS[i].
#: Their addresses are :data:`phasewatch.core.registers.REGISTERS`.
MSRS = ("perf_status", "mperf", "aperf", "pperf", "tsc", "c3", "c6", "c7")

_u32, _u64 = "<u4", "<u8"

RECORD_DTYPE = np.dtype([
    ("t_ns", _u64), ("ip", _u64), ("tsc", _u64), ("perf_status", _u64),
    ("aperf", _u64), ("mperf", _u64), ("pperf", _u64), ("c3", _u64),
    ("c6", _u64), ("c7", _u64), ("instructions", _u64), ("cycles", _u64),
    ("interval", _u64), ("cpu", _u32), ("pid", _u32), ("tid", _u32),
    ("flags", _u32), ("reserved", _u64),
])
HEADER_DTYPE = np.dtype([
    ("magic", _u32), ("version", _u32), ("record_size", _u32), ("nr_records", _u32),
    ("cpu", _u32), ("online", _u32), ("head", _u64), ("tail", _u64),
    ("lost", _u64), ("intervals", _u64),
])
CONFIG_DTYPE = np.dtype([
    ("cpu_mask", _u64, (CPU_WORDS,)), ("period_ns", _u64), ("interval_insns", _u64),
    ("target_tgid", _u32), ("msr_mask", _u32), ("nr_records", _u32),
    ("watermark", _u32), ("ring_bytes", _u64), ("reserved", _u64, (2,)),
])
STATS_DTYPE = np.dtype([
    ("ticks", _u64), ("records", _u64), ("lost", _u64), ("skipped", _u64),
    ("intervals", _u64), ("msr_faults", _u64), ("missed", _u64), ("clock", _u32),
    ("running", _u32), ("nr_cpus", _u32), ("reserved", _u32),
])
CONSUME_DTYPE = np.dtype([("cpu", _u32), ("reserved", _u32), ("tail", _u64)])

IOC_MAGIC = 0xBD


def _ioc(direction: int, nr: int, size: int) -> int:
    return ioc(direction, IOC_MAGIC, nr, size)


IOC_CONFIGURE = _ioc(IOC_READ | IOC_WRITE, 1, CONFIG_DTYPE.itemsize)
IOC_START = _ioc(IOC_NONE, 2, 0)
IOC_STOP = _ioc(IOC_NONE, 3, 0)
IOC_STATS = _ioc(IOC_READ, 4, STATS_DTYPE.itemsize)
IOC_CONSUME = _ioc(IOC_WRITE, 5, CONSUME_DTYPE.itemsize)

class KmodError(OSError):
    """The module refused a request, or a ring is not what the ABI says."""


def ring_bytes(nr_records: int) -> int:
    """Bytes one CPU's ring takes in the mapping (page aligned)."""
    size = HEADER_BYTES + nr_records * RECORD_DTYPE.itemsize
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE


class Ring:
    """One CPU's ring as numpy views over a read-only mapping."""

    def __init__(self, buffer, offset: int = 0):
        self.header = np.frombuffer(buffer, HEADER_DTYPE, count=1, offset=offset)[0]
        if int(self.header["magic"]) != RING_MAGIC:
            raise KmodError(f"no phasewatch ring at offset {offset}")
        if int(self.header["record_size"]) != RECORD_DTYPE.itemsize:
            raise KmodError(f"record size {int(self.header['record_size'])}, "
                            f"this reader knows {RECORD_DTYPE.itemsize}")
        self.cpu = int(self.header["cpu"])
        self.nr_records = int(self.header["nr_records"])
        self.records = np.frombuffer(buffer, RECORD_DTYPE, count=self.nr_records,
                                     offset=offset + HEADER_BYTES)
        self.tail = int(self.header["tail"])
        self.overrun = 0

    @property
    def lost(self) -> int:
        """Records the module dropped on a full ring, plus any the reader missed."""
        return int(self.header["lost"]) + self.overrun

    def take(self) -> np.ndarray:
        """Copy out the records written since the last take (one copy per span)."""
        head = int(self.header["head"])
        if head - self.tail > self.nr_records:
            self.overrun += head - self.tail - self.nr_records
            self.tail = head - self.nr_records
        start, stop = self.tail % self.nr_records, self.tail % self.nr_records + head - self.tail
        if stop <= self.nr_records:
            out = self.records[start:stop].copy()
        else:
            out = np.concatenate([self.records[start:], self.records[:stop - self.nr_records]])
        self.tail = head
        return out


def records_to_batch(records: np.ndarray, signals: Iterable[str]) -> SampleBatch:
    """Columns of a batch from structured records; one vectorised copy per column."""
    user = (records["flags"] & REC_USER) != 0
    columns = {
        "t_ns": records["t_ns"].astype(np.int64),
        "cpu": records["cpu"].astype(np.int32),
        "tid": records["tid"].astype(np.int32),
        "ip": np.where(user, records["ip"], MISSING),
    }
    for name in signals:
        if name not in columns:
            columns[name] = records[name]
    return SampleBatch(columns)


def _cpu_mask(cpus: Iterable[int]) -> np.ndarray:
    mask = np.zeros(CPU_WORDS, np.uint64)
    for cpu in cpus:
        if not 0 <= cpu < CPU_WORDS * 64:
            raise ValueError(f"cpu {cpu} outside 0..{CPU_WORDS * 64 - 1}")
        mask[cpu // 64] |= np.uint64(1 << (cpu % 64))
    return mask


def msr_mask(names: Iterable[str]) -> int:
    mask = 0
    for name in names:
        if name not in MSRS:
            raise ValueError(f"MSR {name!r} is not on the module's allowlist {MSRS}")
        mask |= 1 << MSRS.index(name)
    return mask


class KmodSource:
    """A :class:`phasewatch.core.source.Source` over ``/dev/phasewatch`` (or a ring file)."""

    def __init__(self, device: str = DEVICE, *, cpus: Iterable[int] | None = None,
                 period_ns: int = 0, interval_instructions: int = 0,
                 target_tgid: int = 0, msrs: Iterable[str] = MSRS,
                 nr_records: int = 0, watermark: int = 0, poll_timeout_ms: int = 100):
        self.device = device
        self._fd = os.open(device, os.O_RDWR if _is_device(device) else os.O_RDONLY)
        self._maps: list[mmap.mmap] = []
        self._poll_timeout_ms = poll_timeout_ms
        self._closed = False
        self._batches = 0
        self._final_stats: dict[str, int] = {}
        try:
            if _is_device(device):
                cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
                self._config = self._configure(cpus, period_ns, interval_instructions,
                                               target_tgid, msr_mask(msrs), nr_records,
                                               watermark)
                self.rings = [self._map_ring(cpu) for cpu in cpus]
            else:
                self._config = None
                self.rings = self._map_file()
        except BaseException:
            self.close()
            raise
        self._msrs = tuple(msrs) if self._config is not None else MSRS
        self.metadata = self._describe()

    # -- the device ------------------------------------------------------
    def _configure(self, cpus, period_ns, interval, tgid, msrs, nr_records, watermark):
        config = np.zeros(1, CONFIG_DTYPE)
        config["cpu_mask"] = _cpu_mask(cpus)
        config["period_ns"] = period_ns
        config["interval_insns"] = interval
        config["target_tgid"] = tgid
        config["msr_mask"] = msrs
        config["nr_records"] = nr_records
        config["watermark"] = watermark
        buf = bytearray(config.tobytes())
        fcntl.ioctl(self._fd, IOC_CONFIGURE, buf, True)
        return np.frombuffer(bytes(buf), CONFIG_DTYPE)[0]

    def _map_ring(self, cpu: int) -> Ring:
        size = int(self._config["ring_bytes"])
        m = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ, offset=cpu * size)
        self._maps.append(m)
        return Ring(m)

    def _map_file(self) -> list[Ring]:
        size = os.fstat(self._fd).st_size
        m = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        self._maps.append(m)
        rings, offset = [], 0
        while offset < size:
            ring = Ring(m, offset)
            rings.append(ring)
            offset += ring_bytes(ring.nr_records)
        return rings

    def _consume(self, ring: Ring) -> None:
        if self._config is None:
            return
        arg = np.zeros(1, CONSUME_DTYPE)
        arg["cpu"], arg["tail"] = ring.cpu, ring.tail
        fcntl.ioctl(self._fd, IOC_CONSUME, arg.tobytes())

    def _ioctl_stats(self) -> dict[str, int]:
        buf = bytearray(STATS_DTYPE.itemsize)
        fcntl.ioctl(self._fd, IOC_STATS, buf, True)
        s = np.frombuffer(bytes(buf), STATS_DTYPE)[0]
        return {name: int(s[name]) for name in STATS_DTYPE.names if name != "reserved"}

    # -- the Source protocol -----------------------------------------------
    @property
    def signals(self) -> tuple[str, ...]:
        counters = ("instructions", "cycles") if self._clock() == "instructions" else ()
        return ("t_ns", "cpu", "tid", "ip") + tuple(self._msrs) + counters

    def _clock(self) -> str:
        if self._config is None:
            return "instructions" if self._file_has_counters() else "software"
        return CLOCKS[self._ioctl_stats()["clock"]]

    def _file_has_counters(self) -> bool:
        return any(len(r.records) and r.records["instructions"][0] != MISSING for r in self.rings)

    def _describe(self) -> dict:
        cfg = self._config
        kmod = {"device": self.device, "abi_version": ABI_VERSION,
                "cpus": [r.cpu for r in self.rings],
                "ring_records": [r.nr_records for r in self.rings],
                "msrs": {n: hex(REGISTERS[n]) for n in self._msrs}}
        if cfg is not None:
            kmod.update(period_ns=int(cfg["period_ns"]),
                        interval_instructions=int(cfg["interval_insns"]),
                        target_tgid=int(cfg["target_tgid"]))
        return {"source": "kmod", "counter_scope": "cpu", "kmod": kmod,
                "signals": {n: "kmod" for n in self.signals}}

    def drain(self, signals: tuple[str, ...]) -> SampleBatch:
        """Everything the rings hold now, in time order, released to the module."""
        parts = []
        for ring in self.rings:
            records = ring.take()
            self._consume(ring)
            if len(records):
                parts.append(records)
        if not parts:
            return SampleBatch.empty(signals)
        records = np.concatenate(parts)
        records = records[np.argsort(records["t_ns"], kind="stable")]
        return records_to_batch(records, signals)

    def batches(self) -> Iterator[SampleBatch]:
        if self._config is None:
            batch = self.drain(self.signals)
            if len(batch):
                yield batch
            return
        fcntl.ioctl(self._fd, IOC_START)
        signals = self.signals
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        try:
            while not self._closed:
                poller.poll(self._poll_timeout_ms)
                batch = self.drain(signals)
                if len(batch):
                    self._batches += 1
                    yield batch
        finally:
            if not self._closed:
                fcntl.ioctl(self._fd, IOC_STOP)

    def stats(self) -> dict[str, int]:
        if self._closed:
            return dict(self._final_stats)
        if self._config is not None:
            out = self._ioctl_stats()
        else:
            out = {"records": sum(int(r.header["head"]) for r in self.rings),
                   "intervals": sum(int(r.header["intervals"]) for r in self.rings)}
        out["lost"] = sum(r.lost for r in self.rings)
        out["batches"] = self._batches
        out["samples"] = out["records"]
        out["lost_samples"] = out["lost"]
        out["errors"] = out.get("msr_faults", 0)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._final_stats = self.stats() if hasattr(self, "rings") else {}
        if getattr(self, "_config", None) is not None:
            try:
                fcntl.ioctl(self._fd, IOC_STOP)     # sampling ends with the reader
            except OSError:
                pass
        self._closed = True
        self.rings = []
        for m in self._maps:
            try:
                m.close()
            except BufferError:     # a caller still holds a view; unmapped when it goes
                pass
        self._maps = []
        os.close(self._fd)


def _is_device(path: str) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)


def read_ring_file(path: str) -> SampleBatch:
    """All records of a ring file (rings back to back), as one batch."""
    src = KmodSource(path)
    try:
        return concat([b for b in src.batches()]) if src.rings else SampleBatch.empty()
    finally:
        src.close()
