"""Split decoded samples into intervals and build each interval's execution profile.

An execution profile is the concatenation of three histograms (segments):
core voltage, productive frequency and the folded instruction-pointer vector.
Which segments a detector compares is the detector's business.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .decode import F
from .histograms import CUMULATIVE, TOTAL_VARIATION, ip_bin, value_bin
from .params import HistogramParams, IntervalParams

SEGMENTS = ("voltage", "pfreq", "ip")
SEGMENT_KINDS = np.array([CUMULATIVE, CUMULATIVE, TOTAL_VARIATION], np.int64)

F_VOLT, F_PFREQ = F["voltage_mv"], F["pfreq_mhz"]
F_DINSTR, F_DCYC = F["d_instructions"], F["d_cycles"]

# Integer state slots of the accumulator.
_STARTED, _CUR_INSTR, _T_START, _T_ORIGIN, _NEXT_T, _SAMPLES, _CYCLES, _INSTR, _T_LAST = range(9)


@dataclass(frozen=True)
class Layout:
    """Where each segment lies in a profile vector."""

    bounds: np.ndarray      # int64[4]: segment s spans bounds[s]:bounds[s+1]

    @classmethod
    def of(cls, hp: HistogramParams) -> "Layout":
        sizes = [hp.voltage_bins, hp.pfreq_bins, hp.ip_bins]
        return cls(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))

    @property
    def width(self) -> int:
        return int(self.bounds[-1])

    def segment(self, profiles: np.ndarray, name: str) -> np.ndarray:
        s = SEGMENTS.index(name)
        return profiles[..., self.bounds[s]:self.bounds[s + 1]]


@dataclass
class IntervalBlock:
    """Intervals completed by one batch, as columns.  ``profiles`` are counts
    until :func:`normalise` turns them into histograms that sum to one."""

    t_start_ns: np.ndarray
    t_end_ns: np.ndarray
    instructions: np.ndarray
    cycles: np.ndarray
    samples: np.ndarray
    profiles: np.ndarray        # float64[n, width]
    segment_samples: np.ndarray  # int64[n, 3]
    voltage_sum: np.ndarray
    pfreq_sum: np.ndarray

    def __len__(self) -> int:
        return len(self.t_end_ns)


def normalise(block: IntervalBlock, layout: Layout) -> None:
    for s in range(len(SEGMENTS)):
        seg = block.profiles[:, layout.bounds[s]:layout.bounds[s + 1]]
        n = block.segment_samples[:, s:s + 1]
        np.divide(seg, n, out=seg, where=n > 0)


class IntervalAccumulator:
    """Holds the interval being built between batches."""

    def __init__(self, ip_: IntervalParams, hp: HistogramParams):
        self.interval = ip_
        self.hist = hp
        self.layout = Layout.of(hp)
        self.time_mode = ip_.kind == "time"
        self.acc = np.zeros(self.layout.width, np.float64)
        self.seg_n = np.zeros(len(SEGMENTS), np.int64)
        self.istate = np.zeros(9, np.int64)
        self.fstate = np.zeros(2, np.float64)
        lo, hi = hp.text_range if hp.text_range else (0, 0)
        self.text_lo, self.text_hi = np.uint64(lo), np.uint64(hi)
        self.ip_bits = int(hp.ip_bins).bit_length() - 1

    def set_text_range(self, lo: int, hi: int) -> None:
        self.text_lo, self.text_hi = np.uint64(lo), np.uint64(hi)

    def feed(self, t_ns: np.ndarray, ip: np.ndarray | None, decoded: np.ndarray) -> IntervalBlock:
        """Add a batch; return the intervals it completed (profiles normalised)."""
        n = len(t_ns)
        cap = max(16, n // 4)
        blocks, start = [], 0
        ips = np.ascontiguousarray(ip) if ip is not None else np.zeros(0, np.uint64)
        t_ns = np.ascontiguousarray(t_ns)
        while True:
            out = _empty_block(cap, self.layout.width)
            k, start = self._run(t_ns, ips, decoded, start, out)
            blocks.append(_head(out, k))
            if start >= n:
                break
        block = blocks[0] if len(blocks) == 1 else _join(blocks)
        normalise(block, self.layout)
        return block

    def pending(self) -> IntervalBlock:
        """The trailing partial interval (not counted as complete), if any samples."""
        out = _empty_block(1, self.layout.width)
        if self.istate[_SAMPLES] == 0:
            return _head(out, 0)
        st = self.istate
        out.t_start_ns[0], out.t_end_ns[0] = st[_T_START], st[_T_LAST]
        out.instructions[0], out.cycles[0], out.samples[0] = st[_INSTR], st[_CYCLES], st[_SAMPLES]
        out.profiles[0], out.segment_samples[0] = self.acc, self.seg_n
        out.voltage_sum[0], out.pfreq_sum[0] = self.fstate
        block = _head(out, 1)
        normalise(block, self.layout)
        return block

    def _run(self, t_ns, ips, decoded, start, out):
        hp = self.hist
        return _accumulate(
            t_ns, ips, decoded, start, self.time_mode, int(self.interval.size),
            hp.voltage_mv[0], hp.voltage_mv[1], hp.pfreq_mhz[0], hp.pfreq_mhz[1],
            self.text_lo, self.text_hi, self.ip_bits, hp.ip_fold_groups,
            self.layout.bounds, self.acc, self.seg_n, self.istate, self.fstate,
            out.t_start_ns, out.t_end_ns, out.instructions, out.cycles, out.samples,
            out.profiles, out.segment_samples, out.voltage_sum, out.pfreq_sum)


def _empty_block(cap: int, width: int) -> IntervalBlock:
    return IntervalBlock(
        np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int64),
        np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros((cap, width)),
        np.zeros((cap, len(SEGMENTS)), np.int64), np.zeros(cap), np.zeros(cap))


def _head(block: IntervalBlock, k: int) -> IntervalBlock:
    return IntervalBlock(*(getattr(block, f)[:k] for f in IntervalBlock.__dataclass_fields__))


def _join(blocks: list[IntervalBlock]) -> IntervalBlock:
    return IntervalBlock(*(np.concatenate([getattr(b, f) for b in blocks])
                           for f in IntervalBlock.__dataclass_fields__))


@numba.njit(cache=True, nogil=True)
def _accumulate(t_ns, ips, dec, start, time_mode, size, v_lo, v_hi, f_lo, f_hi,
                text_lo, text_hi, ip_bits, ip_groups, bounds, acc, seg_n, istate, fstate,
                o_t_start, o_t_end, o_instr, o_cycles, o_samples, o_prof, o_segn,
                o_vsum, o_fsum):
    """Add rows from ``start`` on; stop after the last row or when the output is
    full.  Returns (intervals written, next row)."""
    n = len(t_ns)
    cap = len(o_t_end)
    have_ip = len(ips) == n and text_hi > text_lo
    v_bins = bounds[1] - bounds[0]
    f_bins = bounds[2] - bounds[1]
    k = 0
    i = start
    while i < n and k < cap:
        t = t_ns[i]
        if istate[_STARTED] == 0:
            istate[_STARTED] = 1
            istate[_T_START] = t
            istate[_T_ORIGIN] = t
            istate[_NEXT_T] = t + size
        row = dec[i]
        v = row[F_VOLT]
        if v == v:
            acc[bounds[0] + value_bin(v, v_lo, v_hi, v_bins)] += 1.0
            seg_n[0] += 1
            fstate[0] += v
        pf = row[F_PFREQ]
        if pf == pf:
            acc[bounds[1] + value_bin(pf, f_lo, f_hi, f_bins)] += 1.0
            seg_n[1] += 1
            fstate[1] += pf
        if have_ip:
            b = ip_bin(ips[i], text_lo, text_hi, ip_bits, ip_groups)
            if b >= 0:
                acc[bounds[2] + b] += 1.0
                seg_n[2] += 1
        d_instr = np.int64(row[F_DINSTR])
        istate[_INSTR] += d_instr
        istate[_CYCLES] += np.int64(row[F_DCYC])
        istate[_SAMPLES] += 1
        istate[_T_LAST] = t
        if time_mode:
            done = t >= istate[_NEXT_T]
        else:
            istate[_CUR_INSTR] += d_instr
            done = istate[_CUR_INSTR] >= size
        i += 1
        if not done:
            continue
        o_t_start[k] = istate[_T_START]
        o_t_end[k] = t
        o_instr[k] = istate[_INSTR]
        o_cycles[k] = istate[_CYCLES]
        o_samples[k] = istate[_SAMPLES]
        o_prof[k, :] = acc
        o_segn[k, :] = seg_n
        o_vsum[k] = fstate[0]
        o_fsum[k] = fstate[1]
        k += 1
        if time_mode:
            istate[_NEXT_T] = istate[_T_ORIGIN] + ((t - istate[_T_ORIGIN]) // size + 1) * size
        else:
            istate[_CUR_INSTR] = (istate[_CUR_INSTR] - size) % size
        istate[_T_START] = t
        istate[_INSTR] = 0
        istate[_CYCLES] = 0
        istate[_SAMPLES] = 0
        acc[:] = 0.0
        seg_n[:] = 0
        fstate[:] = 0.0
    return k, i

