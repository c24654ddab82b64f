"""Raw counters to units: voltage, frequencies, CPI and C-state residency.

Deltas are taken against the previous sample of the same CPU.  A counter that
goes backwards (a wrap or a reset) or a value the source could not read
(:data:`~phasewatch.core.batch.MISSING`) yields no delta: the derived values that
need it are NaN, and backward steps are counted per counter.
"""

from __future__ import annotations

import numpy as np

from .batch import ID_RANGES, MISSING, SampleBatch
from .cpumodels import MAX_PLAUSIBLE_MHZ, PLAUSIBLE_VOLTAGE_MV
from .distinct import distinct
from .kernels import kernel
from .registers import VOLTAGE_MASK, VOLTAGE_SHIFT, VOLTAGE_UNITS_PER_VOLT

#: Counters decoded by delta, in the order of the decoder's state columns.
COUNTERS = ("aperf", "mperf", "pperf", "tsc", "instructions", "cycles", "c3", "c6", "c7")
#: Columns of the decoded array, in order.
FIELDS = ("voltage_mv", "freq_mhz", "pfreq_mhz", "cpi", "d_instructions", "d_cycles",
          "c0", "c1", "c3", "c6", "c7")
F = {name: i for i, name in enumerate(FIELDS)}
#: Derived fields checked against the plausible bounds of cpumodels.
CHECKED = ("voltage_mv", "freq_mhz", "pfreq_mhz")
_EMPTY_U64 = np.zeros(0, np.uint64)
_MISSING = np.uint64(MISSING)


#: The counters the phase detector's profiles and CPI need; the rest only
#: feed frequency and C-state residency.
PROFILE_COUNTERS = ("mperf", "pperf", "instructions", "cycles")


class DecoderState:
    """Previous raw counter values per counter owner, and counts of dropped
    deltas.  The owner is the CPU (``scope="cpu"``: MSRs, system-wide perf
    counters) or the thread (``scope="thread"``: perf counters that follow a
    task).  Only ``counters`` are decoded; the values derived from the others
    are NaN."""

    def __init__(self, counters=COUNTERS, scope: str = "cpu"):
        if scope not in ("cpu", "thread"):
            raise ValueError(f"counter scope {scope!r}: 'cpu' or 'thread'")
        self.decoded = tuple(k for k, name in enumerate(COUNTERS) if name in counters)
        self._not_decoded = tuple(k for k in range(len(COUNTERS)) if k not in self.decoded)
        self.scope = scope
        self.owners = np.zeros(0, np.int64)       # CPU or thread ids seen, in slot order
        self._slot_of = np.full(ID_RANGES["cpu"][1] + 1, -1, np.int32)   # CPU id -> slot
        self.prev = np.zeros((0, len(COUNTERS)), np.uint64)
        self.prev_ok = np.zeros((0, len(COUNTERS)), np.bool_)
        self.backwards = np.zeros(len(COUNTERS), np.int64)
        self.unread = np.zeros(len(COUNTERS), np.int64)
        self.implausible = np.zeros(len(CHECKED), np.int64)
        self._deltas = np.empty(0)
        self._out = np.empty(0)
        self._rows = -1

    def scratch(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Work arrays for ``n`` rows, reused from batch to batch: fresh memory
        costs a page fault per page, more than decoding it.  Each is a
        C-contiguous (fields, n) view of a flat buffer, whatever ``n``."""
        if n * len(FIELDS) > len(self._out):
            self._deltas = np.empty(len(COUNTERS) * n)
            self._out = np.empty(len(FIELDS) * n)
        deltas = self._deltas[:len(COUNTERS) * n].reshape(len(COUNTERS), n)
        if n != self._rows:     # the rows of counters not decoded must read NaN
            for k in self._not_decoded:
                deltas[k].fill(np.nan)
            self._rows = n
        return deltas, self._out[:len(FIELDS) * n].reshape(len(FIELDS), n)

    def slots(self, batch: SampleBatch) -> np.ndarray:
        """Each row's slot in ``prev``: one slot per CPU (or thread) id seen so
        far, so that state is sized by the number of owners, never by the
        largest id, and compiled code only ever indexes slots that exist."""
        ids = batch["cpu"] if self.scope == "cpu" else batch["tid"]
        if len(ids) == 0:
            return np.zeros(0, np.int32)
        first = ids[0]
        if len(self.owners) and self.owners[0] == first and (ids == first).all():
            return np.zeros(len(ids), np.int32)
        if self.scope == "cpu":
            return self._cpu_slots(ids)
        return self._new_slots(ids)

    def _cpu_slots(self, cpus: np.ndarray) -> np.ndarray:
        """CPU ids are few and small: a lookup table, not a sort."""
        lo, hi = int(cpus.min()), int(cpus.max())
        if lo < 0 or hi > ID_RANGES["cpu"][1]:
            raise ValueError(f"CPU id {lo if lo < 0 else hi} outside {ID_RANGES['cpu']}")
        slots = self._slot_of[cpus]
        if (slots < 0).any():
            self._new_slots(cpus)
            self._slot_of[self.owners] = np.arange(len(self.owners), dtype=np.int32)
            slots = self._slot_of[cpus]
        return slots

    def _new_slots(self, ids: np.ndarray) -> np.ndarray:
        seen = distinct(ids)
        new = seen[~np.isin(seen, self.owners)]
        if len(new):
            self.owners = np.concatenate([self.owners, new])
            self._grow(len(self.owners))
        order = np.argsort(self.owners, kind="stable")
        return order[np.searchsorted(self.owners, ids, sorter=order)].astype(np.int32)

    def _grow(self, size: int) -> None:
        if size <= len(self.prev):
            return
        grow = size - len(self.prev)
        self.prev = np.vstack([self.prev, np.zeros((grow, len(COUNTERS)), np.uint64)])
        self.prev_ok = np.vstack([self.prev_ok, np.zeros((grow, len(COUNTERS)), np.bool_)])

    def implausible_values(self) -> dict[str, int]:
        """Decoded values outside the plausible bounds, left out, by field."""
        return {n: int(c) for n, c in zip(CHECKED, self.implausible) if c}

    def dropped(self) -> dict[str, int]:
        """Deltas dropped because a counter went backwards, by counter."""
        return {n: int(c) for n, c in zip(COUNTERS, self.backwards) if c}


def decode(batch: SampleBatch, state: DecoderState, base_mhz: float,
           voltage_from_perf_status: bool = True) -> np.ndarray:
    """Decode a batch into a float array of shape (len(FIELDS), rows), one
    contiguous row per field.  It is the state's scratch space: valid until the
    next call."""
    owner = state.slots(batch)
    n = len(owner)
    deltas, out = state.scratch(n)
    one_owner = n > 0 and owner[0] == owner[-1] and (owner == owner[0]).all()
    for k in state.decoded:
        col = batch.get(COUNTERS[k])
        if col is None:
            deltas[k].fill(np.nan)
            continue
        kernel = _delta_one_owner if one_owner else _delta_kernel
        kernel(np.ascontiguousarray(col), owner, k, state.prev, state.prev_ok,
               state.backwards, state.unread, deltas[k])
    status = batch.get("perf_status") if voltage_from_perf_status else None
    status = np.ascontiguousarray(status) if status is not None else _EMPTY_U64
    _derive_kernel(deltas, status, float(base_mhz), 3 in state.decoded, out)
    vcore = None if voltage_from_perf_status else batch.get("vcore_mv")
    if vcore is not None:
        _hwmon_voltage(np.ascontiguousarray(vcore), out[0])
    _drop_implausible(out, PLAUSIBLE_VOLTAGE_MV[0], PLAUSIBLE_VOLTAGE_MV[1], MAX_PLAUSIBLE_MHZ,
                      state.implausible)
    return out


@kernel(cache=True, nogil=True)
def _drop_implausible(out, lo_mv, hi_mv, max_mhz, counts):
    """Voltages outside [lo_mv, hi_mv] and clocks above max_mhz become NaN,
    counted in ``counts`` (voltage, frequency, productive frequency)."""
    for i in range(out.shape[1]):
        v = out[0, i]
        if v == v and (v < lo_mv or v > hi_mv):
            out[0, i] = np.nan
            counts[0] += 1
        for k in range(1, 3):
            f = out[k, i]
            if f == f and f > max_mhz:
                out[k, i] = np.nan
                counts[k] += 1


@kernel(cache=True, nogil=True)
def _delta_kernel(values, owner, k, prev, prev_ok, backwards, unread, out):
    """Deltas of one counter against the owner's previous value; NaN where
    there is none to take (every row is written: ``out`` is reused).  The current owner's previous value is kept in
    locals while rows stay on it."""
    cur, p, ok = -1, np.uint64(0), False
    back, lost = 0, 0
    for i in range(len(values)):
        c = owner[i]
        if c != cur:
            if cur >= 0:
                prev[cur, k], prev_ok[cur, k] = p, ok
            cur, p, ok = c, prev[c, k], prev_ok[c, k]
        v = values[i]
        out[i] = np.nan
        if v == _MISSING:
            lost += 1
            ok = False
            continue
        if ok:
            if v >= p:
                out[i] = float(v - p)
            else:
                back += 1
        p, ok = v, True
    if cur >= 0:
        prev[cur, k], prev_ok[cur, k] = p, ok
    backwards[k] += back
    unread[k] += lost


@kernel(cache=True, nogil=True, error_model="numpy")
def _delta_one_owner(values, owner, k, prev, prev_ok, backwards, unread, out):
    """_delta_kernel for rows that all share one owner, written so that LLVM
    vectorises it: the common case of one CPU or one thread per batch."""
    n = len(values)
    c = owner[0]
    lost = 0
    for i in range(n):
        lost += values[i] == _MISSING
    if lost:
        _delta_kernel(values, owner, k, prev, prev_ok, backwards, unread, out)
        return
    out[0] = np.nan
    if prev_ok[c, k]:
        out[0] = float(values[0] - prev[c, k]) if values[0] >= prev[c, k] else np.nan
        backwards[k] += values[0] < prev[c, k]
    back = 0
    for i in range(1, n):
        a, b = values[i - 1], values[i]
        out[i] = float(b - a) if b >= a else np.nan
        back += b < a
    backwards[k] += back
    prev[c, k], prev_ok[c, k] = values[n - 1], True


@kernel(cache=True, nogil=True, error_model="numpy")
def _derive_kernel(d, status, base_mhz, residency, out):
    """Derived values from the deltas.  Each field is its own loop over a few
    rows: with every stream in one loop, LLVM could not rule out aliasing and
    did not vectorise (it ran five times slower)."""
    _voltage(status, out[0])
    _ratio(d[0], d[1], base_mhz, out[1])            # freq = base × ΔAPERF/ΔMPERF
    _ratio(d[2], d[1], base_mhz, out[2])            # productive = base × ΔPPERF/ΔMPERF
    _ratio(d[5], d[4], 1.0, out[3])                 # CPI = Δcycles/Δinstructions
    _zero_unknown(d[4], out[4])
    _zero_unknown(d[5], out[5])
    if not residency:
        out[6:] = np.nan
        return
    _ratio(d[1], d[3], 1.0, out[6])                 # C0 = ΔMPERF/ΔTSC
    for k in range(6, 9):
        _ratio(d[k], d[3], 1.0, out[k + 2])
    for i in range(out.shape[1]):
        dt, dm = d[3, i], d[1, i]
        idle = dt - dm
        for k in range(6, 9):
            if d[k, i] == d[k, i]:
                idle -= d[k, i]
        out[7, i] = max(idle, 0.0) / dt if dt > 0 and dm == dm else np.nan


@kernel(cache=True, nogil=True, error_model="numpy")
def _ratio(num, den, scale, out):
    for i in range(len(out)):
        out[i] = scale * num[i] / den[i] if den[i] > 0 else np.nan


@kernel(cache=True, nogil=True)
def _zero_unknown(values, out):
    for i in range(len(out)):
        v = values[i]
        out[i] = v if v == v else 0.0


@kernel(cache=True, nogil=True)
def _hwmon_voltage(millivolts, out):
    """Core voltage read from hwmon, already in mV."""
    for i in range(len(out)):
        v = millivolts[i]
        out[i] = float(v) if v != _MISSING and v != 0 else np.nan


@kernel(cache=True, nogil=True)
def _voltage(status, out):
    """Core voltage from IA32_PERF_STATUS, in mV."""
    if len(status) != len(out):
        out[:] = np.nan
        return
    for i in range(len(out)):
        s = status[i]
        raw = (s >> np.uint64(VOLTAGE_SHIFT)) & np.uint64(VOLTAGE_MASK)
        out[i] = raw * (1000.0 / VOLTAGE_UNITS_PER_VOLT) if s != _MISSING and raw != 0 else np.nan
