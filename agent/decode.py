"""Raw counters to units: voltage, frequencies, CPI and C-state residency.

Deltas are taken against the previous sample of the same CPU.  A counter that
goes backwards (a wrap or a reset) or a value the source could not read
(:data:`~phasewatch.batch.MISSING`) yields no delta: the derived values that
need it are NaN, and backward steps are counted per counter.
"""

from __future__ import annotations

import numba
import numpy as np

from .batch import MISSING, SampleBatch

#: Counters decoded by delta, in the order of the decoder's state columns.
COUNTERS = ("aperf", "mperf", "pperf", "tsc", "instructions", "cycles", "c3", "c6", "c7")
#: Columns of the decoded array, in order.
FIELDS = ("voltage_mv", "freq_mhz", "pfreq_mhz", "cpi", "d_instructions", "d_cycles",
          "c0", "c1", "c3", "c6", "c7")
F = {name: i for i, name in enumerate(FIELDS)}
_EMPTY_U64 = np.zeros(0, np.uint64)
_MISSING = np.uint64(MISSING)


class DecoderState:
    """Previous raw counter values per CPU, and counts of dropped deltas."""

    def __init__(self, max_cpu: int = 0):
        self.prev = np.zeros((max_cpu + 1, len(COUNTERS)), np.uint64)
        self.prev_ok = np.zeros((max_cpu + 1, len(COUNTERS)), np.bool_)
        self.backwards = np.zeros(len(COUNTERS), np.int64)
        self.unread = np.zeros(len(COUNTERS), np.int64)

    def ensure_cpu(self, max_cpu: int) -> None:
        if max_cpu < len(self.prev):
            return
        grow = max_cpu + 1 - len(self.prev)
        self.prev = np.vstack([self.prev, np.zeros((grow, len(COUNTERS)), np.uint64)])
        self.prev_ok = np.vstack([self.prev_ok, np.zeros((grow, len(COUNTERS)), np.bool_)])

    def dropped(self) -> dict[str, int]:
        """Deltas dropped because a counter went backwards, by counter."""
        return {n: int(c) for n, c in zip(COUNTERS, self.backwards) if c}


def counter_columns(batch: SampleBatch) -> tuple[list[np.ndarray], np.ndarray]:
    """The batch's counter columns in COUNTERS order, and which are present."""
    cols, have = [], np.zeros(len(COUNTERS), np.bool_)
    for k, name in enumerate(COUNTERS):
        col = batch.get(name)
        have[k] = col is not None
        cols.append(np.ascontiguousarray(col) if col is not None else _EMPTY_U64)
    return cols, have


def decode(batch: SampleBatch, state: DecoderState, base_mhz: float,
           voltage_from_perf_status: bool = True) -> np.ndarray:
    """Decode a batch into a float array of shape (rows, len(FIELDS))."""
    cpu = np.ascontiguousarray(batch["cpu"])
    if len(cpu):
        state.ensure_cpu(int(cpu.max()))
    cols, have = counter_columns(batch)
    status = batch.get("perf_status") if voltage_from_perf_status else None
    status = np.ascontiguousarray(status) if status is not None else _EMPTY_U64
    out = np.empty((len(cpu), len(FIELDS)), np.float64)
    _decode_kernel(cpu, status, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5],
                   cols[6], cols[7], cols[8], have, float(base_mhz),
                   state.prev, state.prev_ok, state.backwards, state.unread, out)
    return out


@numba.njit(cache=True, nogil=True)
def _voltage_mv(status):
    raw = (status >> np.uint64(32)) & np.uint64(0xFFFF)
    if raw == 0:
        return np.nan
    return raw * (1000.0 / 8192.0)


@numba.njit(cache=True, nogil=True)
def _decode_kernel(cpu, status, aperf, mperf, pperf, tsc, instr, cycles, c3, c6, c7,
                   have, base_mhz, prev, prev_ok, backwards, unread, out):
    n = len(cpu)
    d = np.empty(9, np.float64)
    have_status = len(status) == n and n > 0
    for i in range(n):
        c = cpu[i]
        for k in range(9):
            d[k] = np.nan
            if not have[k]:
                continue
            if k == 0:
                v = aperf[i]
            elif k == 1:
                v = mperf[i]
            elif k == 2:
                v = pperf[i]
            elif k == 3:
                v = tsc[i]
            elif k == 4:
                v = instr[i]
            elif k == 5:
                v = cycles[i]
            elif k == 6:
                v = c3[i]
            elif k == 7:
                v = c6[i]
            else:
                v = c7[i]
            if v == _MISSING:
                unread[k] += 1
                prev_ok[c, k] = False
                continue
            if prev_ok[c, k]:
                if v >= prev[c, k]:
                    d[k] = float(v - prev[c, k])
                else:
                    backwards[k] += 1
            prev[c, k] = v
            prev_ok[c, k] = True
        row = out[i]
        row[0] = np.nan
        if have_status and status[i] != _MISSING:
            row[0] = _voltage_mv(status[i])
        da, dm, dp, dt, di, dc = d[0], d[1], d[2], d[3], d[4], d[5]
        row[1] = base_mhz * da / dm if dm > 0 else np.nan
        row[2] = base_mhz * dp / dm if dm > 0 else np.nan
        row[3] = dc / di if di > 0 else np.nan
        row[4] = di if di == di else 0.0
        row[5] = dc if dc == dc else 0.0
        if dt > 0:
            row[6] = dm / dt
            row[8] = d[6] / dt
            row[9] = d[7] / dt
            row[10] = d[8] / dt
            idle = dt - dm
            for k in range(6, 9):
                if d[k] == d[k]:
                    idle -= d[k]
            row[7] = max(idle, 0.0) / dt if dm == dm else np.nan
        else:
            for k in range(6, 11):
                row[k] = np.nan
