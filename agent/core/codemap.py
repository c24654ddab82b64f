"""The code signature: instruction pointers over every executable mapping of a
process, hashed by code region into a fixed-length vector.

Each IP is mapped to (object, offset): the object is the file a mapping comes
from (main executable or shared library, by its name without the folder, so
that the same build at another path gives the same entries: a build folder,
a container's root, ``/lib`` or ``/usr/lib``), an anonymous executable
mapping (JIT code, each mapping its own object) or the kernel (all kernel
addresses, one object); the offset is the file offset (``ip - start +
mapping offset``), the offset into the anonymous mapping, or the distance from
the kernel's half of the address space.  The offset is cut into regions of
``2**region_bits`` bytes, and each (object, region) pair is hashed into one of
``bins`` entries.  Distinct hot code regions land in distinct entries unless
their hashes collide, at a rate of about one pair in ``bins``; the thesis's
fold over the main program's ``.text`` (``histograms.ip_bins``) puts any two
regions ``1/32`` of the text apart into the same entry.

Mappings come as in a trace's metadata: ``{"start", "end", "offset", "path"}``
and, for those that appeared while the program ran, ``"t_ns"``: the mapping
applies to samples taken at or after ``t_ns``, and a mapping seen later at
overlapping addresses (exec, dlclose + dlopen) ends it there.  A mapping
with a ``"pid"`` (learnt from perf's records of a process tree) belongs to
that process only: each sample is placed in the mappings of its own process
(the batch's ``pid`` column), so the same code in two processes, at whatever
addresses each put it, gives the same entries.  Mappings without a pid (read
from ``/proc`` before the watch began, or from an older recording) are
every process's, looked at after its own.  IPs in no mapping are unknown
(-1), as are 0 and MISSING.  With no mapping list at all
(a raw CSV), every user-space address counts as one object, so regions are
hashed by absolute address.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from .batch import KERNEL_START, MISSING
from .distinct import distinct
from .kernels import kernel

ANON_PATHS = ("", "[anon]")
NEVER = np.iinfo(np.int64).min
FOREVER = np.iinfo(np.int64).max


def object_key(name: str) -> np.uint64:
    """A stable 64-bit name for an object (the same in every run and replay),
    from the bytes of its name (a path that is not UTF-8 keeps its bytes)."""
    raw = name.encode("utf-8", "surrogateescape")
    return np.uint64((zlib.crc32(raw) << 32) | zlib.adler32(raw))


KERNEL_KEY = object_key("[kernel]")
WHOLE_SPACE_KEY = object_key("[address space]")


def mapping_object(m: dict) -> str:
    """The object a mapping belongs to: its file's name, or, for anonymous
    executable memory, the mapping itself."""
    path = m.get("path") or ""
    return f"[anon@{int(m['start']):x}]" if path in ANON_PATHS else path.rpartition("/")[2]


@dataclass(frozen=True)
class CodeMap:
    """Executable mappings as sorted columns, for the kernel's search: one
    group of rows per process (by ``pid``), and the group of mappings
    recorded without one (pid 0), which every process falls back to."""

    starts: np.ndarray     # uint64, ascending within each group
    ends: np.ndarray       # uint64
    reach: np.ndarray      # uint64: largest end among the group's mappings up to i
    base: np.ndarray       # uint64: object offset of each mapping's start
    keys: np.ndarray       # uint64: object_key of each mapping's object
    since: np.ndarray      # int64: first sample time it applies to
    until: np.ndarray      # int64: time a newer overlapping mapping replaced it
    whole_space: bool      # no mapping list: all user space is one object
    group_pids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # ascending
    group_lo: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))    # first row
    group_hi: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))    # past last

    @classmethod
    def from_mappings(cls, mappings: list[dict] | None) -> "CodeMap":
        if mappings is None:
            return cls(*(np.zeros(0, np.uint64) for _ in range(5)), np.zeros(0, np.int64),
                       np.zeros(0, np.int64), True)
        groups: dict[int, list[tuple]] = {}
        for m in mappings:
            if int(m["end"]) > int(m["start"]):
                groups.setdefault(int(m.get("pid") or 0), []).append(_row(m))
        cols: list[list] = [[] for _ in range(8)]
        bounds = []
        for pid in sorted(groups):
            rows = sorted(groups[pid])
            until = replaced_at(rows)
            order = sorted(range(len(rows)), key=lambda i: (rows[i][1], rows[i][0]))
            lo = len(cols[0])
            for i in order:
                t, start, end, base, key = rows[i]
                for k, value in enumerate((start, end, 0, base, key, t, until[i])):
                    cols[k].append(value)
            ends = np.array(cols[1][lo:], np.uint64)
            cols[2][lo:] = np.maximum.accumulate(ends).tolist()
            bounds.append((pid, lo, len(cols[0])))
        u64 = lambda k: np.array(cols[k], np.uint64)  # noqa: E731
        i64 = lambda values: np.array(values, np.int64)  # noqa: E731
        return cls(u64(0), u64(1), u64(2), u64(3), u64(4), i64(cols[5]), i64(cols[6]), False,
                   i64([b[0] for b in bounds]), i64([b[1] for b in bounds]),
                   i64([b[2] for b in bounds]))

    def bins(self, ips: np.ndarray, t_ns: np.ndarray, region_bits: int, nbins: int,
             out: np.ndarray, unmapped: bool = True, pids: np.ndarray | None = None) -> None:
        """Each IP's entry, in the mappings of its process (``pids``; none:
        the mappings recorded without a process); one in no mapping by its
        address (``unmapped``) or -1."""
        # One argument type for the compiled kernel: a trace's column is read-only.
        pids = np.zeros(len(ips), np.int32) if pids is None else np.array(pids, np.int32)
        code_bins(ips, t_ns, pids, self.starts, self.ends, self.reach,
                  self.base, self.keys, self.since, self.until, self.group_pids, self.group_lo,
                  self.group_hi, self.whole_space, unmapped, region_bits, nbins, out)

    def unknown(self, ips: np.ndarray, t_ns: np.ndarray, pids: np.ndarray | None = None
                ) -> np.ndarray:
        """Which user-space IPs (not 0, not MISSING) fall in no mapping."""
        out = np.empty(len(ips), np.int32)
        self.bins(np.ascontiguousarray(ips), np.ascontiguousarray(t_ns), 0, 1, out,
                  unmapped=False, pids=pids)
        ips = np.asarray(ips)
        return (out < 0) & (ips != 0) & (ips != MISSING) & (ips < KERNEL_START)


def _row(m: dict) -> tuple:
    """(since, start, end, object offset of start, object key) of a mapping."""
    anonymous = (m.get("path") or "") in ANON_PATHS
    return (_since(m), int(m["start"]), int(m["end"]),
            0 if anonymous else int(m.get("offset", 0)), int(object_key(mapping_object(m))))


def _since(m: dict) -> int:
    """When a mapping starts to apply: its ``t_ns``, or always (none, or null)."""
    return NEVER if m.get("t_ns") is None else int(m["t_ns"])


def replaced_at(rows: list[tuple]) -> list[int]:
    """For each mapping ``(t_ns, start, end, ...)``, sorted by ``t_ns``: the
    earliest later ``t_ns`` of a mapping overlapping it (FOREVER if none).

    Addresses are cut into the slots between consecutive starts and ends; the
    mappings are taken latest first, each reading the smallest time stored
    over its slots and then storing its own (never larger), so the work is
    the slots each mapping covers, not every pair of mappings."""
    if not rows:
        return []
    starts = [r[1] for r in rows]
    ends = [r[2] for r in rows]
    points = distinct(np.array(starts + ends, np.uint64))
    lo = np.searchsorted(points, np.array(starts, np.uint64)).tolist()
    hi = np.searchsorted(points, np.array(ends, np.uint64)).tolist()
    earliest = np.full(len(points), FOREVER, np.int64)
    until = [FOREVER] * len(rows)
    j = len(rows)
    while j > 0:                       # one group of equal t_ns at a time
        t = rows[j - 1][0]
        i = j
        while i > 0 and rows[i - 1][0] == t:
            i -= 1
        for k in range(i, j):
            until[k] = int(earliest[lo[k]:hi[k]].min())
        for k in range(i, j):
            earliest[lo[k]:hi[k]] = t
        j = i
    return until


@kernel(cache=True, nogil=True, inline="always")
def _mix(x):
    """SplitMix64's finaliser: every input bit moves every output bit."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


@kernel(cache=True, nogil=True, inline="always")
def _find(ip, t, lo, hi, starts, ends, reach, since, until):
    """Index of the mapping among rows ``lo..hi`` holding ``ip`` at time ``t``, or -1."""
    first = lo
    while lo < hi:                   # first start > ip, by bisection
        mid = (lo + hi) >> 1
        if starts[mid] <= ip:
            lo = mid + 1
        else:
            hi = mid
    j = lo - 1
    while j >= first and reach[j] > ip:
        if ip < ends[j] and since[j] <= t < until[j]:
            return j
        j -= 1
    return -1


@kernel(cache=True, nogil=True, inline="always")
def _group(pid, group_pids):
    """Index of ``pid``'s group of mappings, or -1."""
    lo, hi = 0, len(group_pids)
    while lo < hi:
        mid = (lo + hi) >> 1
        if group_pids[mid] < pid:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(group_pids) and group_pids[lo] == pid else -1


@kernel(cache=True, nogil=True, inline="always")
def _find_for(ip, t, pid, starts, ends, reach, since, until, group_pids, group_lo, group_hi):
    """The mapping holding ``ip`` at ``t`` in process ``pid``, else among
    the mappings of no process (group 0), else -1."""
    g = _group(pid, group_pids)
    j = -1
    if g >= 0:
        j = _find(ip, t, group_lo[g], group_hi[g], starts, ends, reach, since, until)
    if j < 0 and pid != 0 and len(group_pids) > 0 and group_pids[0] == 0:
        j = _find(ip, t, group_lo[0], group_hi[0], starts, ends, reach, since, until)
    return j


@kernel(cache=True, nogil=True)
def code_bins(ips, t_ns, pids, starts, ends, reach, base, keys, since, until, group_pids,
              group_lo, group_hi, whole_space, unmapped, region_bits, nbins, out):
    """Entry of each IP's (object, region) in ``nbins`` entries; an IP in no
    mapping of its process by its address where ``unmapped``, else -1; no
    IP, -1."""
    shift = np.uint64(region_bits)
    n_bins = np.uint64(nbins)
    for i in range(len(ips)):
        ip = ips[i]
        if ip == 0 or ip == MISSING:
            out[i] = -1
            continue
        if ip >= KERNEL_START:
            key, offset = KERNEL_KEY, ip - KERNEL_START
        elif whole_space:
            key, offset = WHOLE_SPACE_KEY, ip
        else:
            j = _find_for(ip, t_ns[i], np.int64(pids[i]), starts, ends, reach, since, until,
                          group_pids, group_lo, group_hi)
            if j >= 0:
                key, offset = keys[j], ip - starts[j] + base[j]
            elif unmapped:
                key, offset = WHOLE_SPACE_KEY, ip
            else:
                out[i] = -1
                continue
        out[i] = np.int32(_mix(key ^ _mix(offset >> shift)) % n_bins)


def _mix_reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def code_bins_reference(ips, t_ns, mappings: list[dict] | None, region_bits: int,
                        nbins: int, pids=None) -> np.ndarray:
    """Entry per IP computed mapping by mapping with whole-array numpy
    operations: first in the mappings of each IP's process (``pids``), then,
    for IPs still unplaced, in those recorded without a process."""
    ips = np.asarray(ips, np.uint64)
    t_ns = np.asarray(t_ns, np.int64)
    pids = np.zeros(len(ips), np.int64) if pids is None else np.asarray(pids, np.int64)
    key = np.zeros(len(ips), np.uint64)
    offset = np.zeros(len(ips), np.uint64)
    known = np.zeros(len(ips), np.bool_)
    user = (ips != 0) & (ips != MISSING) & (ips < KERNEL_START)
    if mappings is None:
        key[user], offset[user], known[user] = WHOLE_SPACE_KEY, ips[user], True
    else:
        table = CodeMap.from_mappings(mappings)
        for own in (True, False):
            for g, pid in enumerate(table.group_pids.tolist()):
                if own == (pid == 0):        # own groups first, then pid 0's for the rest
                    continue
                mine = user & ~known & ((pids == pid) if own else True)
                hit = np.zeros(len(ips), np.bool_)
                for j in range(table.group_lo[g], table.group_hi[g]):
                    inside = (mine & (ips >= table.starts[j]) & (ips < table.ends[j])
                              & (t_ns >= table.since[j]) & (t_ns < table.until[j]))
                    key[inside] = table.keys[j]
                    offset[inside] = ips[inside] - table.starts[j] + table.base[j]
                    hit |= inside
                known |= hit
        left = user & ~known
        key[left], offset[left], known[left] = WHOLE_SPACE_KEY, ips[left], True
    kernel = (ips >= KERNEL_START) & (ips != MISSING)
    key[kernel], offset[kernel], known[kernel] = KERNEL_KEY, ips[kernel] - KERNEL_START, True
    entry = (_mix_reference(key ^ _mix_reference(offset >> np.uint64(region_bits)))
             % np.uint64(nbins)).astype(np.int64)
    return np.where(known, entry, -1)
