"""Split decoded samples into intervals and build each interval's execution profile.

An execution profile is the concatenation of histograms (segments): core
voltage, productive frequency, the code signature (instruction pointers hashed
by code region over every executable mapping, or the thesis's fold over
``.text``), the clock (APERF/MPERF) and the busy share (C0 residency).
Which segments a detector compares is the detector's business.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .batch import KERNEL_START
from .codemap import CodeMap
from .decode import F
from .histograms import (CUMULATIVE, CUMULATIVE_BEYOND_NOISE, MULTI_RESOLUTION, TOTAL_VARIATION,
                         ip_bins, value_bins)
from .kernels import kernel
from .params import HistogramParams, IntervalParams

#: The value segments after the code signature are built only for detectors
#: that compare the code signature too (see ``build_segments``).
SEGMENTS = ("voltage", "pfreq", "ip", "freq", "c0")
SEGMENT_KINDS = np.array([CUMULATIVE, CUMULATIVE, TOTAL_VARIATION, CUMULATIVE, CUMULATIVE],
                         np.int64)
_IP, _FREQ, _C0 = SEGMENTS.index("ip"), SEGMENTS.index("freq"), SEGMENTS.index("c0")
#: Rows of per-sample bins: one per segment, and the code signature's line entry.
_LINE_ROW = len(SEGMENTS)


def segment_kinds(hp: HistogramParams) -> np.ndarray:
    """How each segment is compared: the code signature over mappings holds
    two resolutions side by side; the thesis's fold is one histogram."""
    kinds = SEGMENT_KINDS.copy()
    if hp.value_noise:
        kinds[kinds == CUMULATIVE] = CUMULATIVE_BEYOND_NOISE
    if hp.ip_signature != "fold":
        kinds[_IP] = MULTI_RESOLUTION
    return kinds

F_VOLT, F_PFREQ, F_FREQ, F_C0 = F["voltage_mv"], F["pfreq_mhz"], F["freq_mhz"], F["c0"]
F_DINSTR, F_DCYC = F["d_instructions"], F["d_cycles"]

# Integer state slots of the accumulator.
_STARTED, _CUR_INSTR, _T_START, _T_ORIGIN, _NEXT_T, _SAMPLES, _CYCLES, _INSTR, _T_LAST = range(9)


@dataclass(frozen=True)
class Layout:
    """Where each segment lies in a profile vector."""

    bounds: np.ndarray      # int64[segments + 1]: segment s spans bounds[s]:bounds[s+1]

    @classmethod
    def of(cls, hp: HistogramParams) -> "Layout":
        sizes = [hp.voltage_bins, hp.pfreq_bins, hp.ip_entries, hp.freq_bins, hp.c0_bins]
        return cls(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))

    @property
    def width(self) -> int:
        return int(self.bounds[-1])


@dataclass
class IntervalBlock:
    """Intervals completed by one batch, as columns; each segment of a
    profile is a histogram that sums to one (or all zeros, if it had no samples)."""

    t_start_ns: np.ndarray
    t_end_ns: np.ndarray
    instructions: np.ndarray
    cycles: np.ndarray
    samples: np.ndarray
    profiles: np.ndarray        # float64[n, width of the segments built]
    segment_samples: np.ndarray  # int64[n, segments]
    voltage_sum: np.ndarray
    pfreq_sum: np.ndarray

    def __len__(self) -> int:
        return len(self.t_end_ns)


class IntervalAccumulator:
    """Holds the interval being built between batches."""

    def __init__(self, ip_: IntervalParams, hp: HistogramParams):
        self.interval = ip_
        self.hist = hp
        self.layout = Layout.of(hp)
        self.time_mode = ip_.kind == "time"
        self.samples_mode = ip_.kind == "samples"
        self.acc = np.zeros(self.layout.width, np.float64)
        self.seg_n = np.zeros(len(SEGMENTS), np.int64)
        self.istate = np.zeros(9, np.int64)
        self.fstate = np.zeros(2, np.float64)
        lo, hi = hp.text_range if hp.text_range else (0, 0)
        self.text_lo, self.text_hi = np.uint64(lo), np.uint64(hi)
        self.ip_bits = int(hp.ip_bins).bit_length() - 1
        self._scratch = _empty_block(256, self.layout.width)
        self._bin_scratch = np.empty(0, np.int32)
        self.code_map = CodeMap.from_mappings(None)
        #: Segments built, from the first: a detector that ignores the code
        #: signature costs neither the IP lookup nor 2 x 1024 entries an interval.
        self.built = len(SEGMENTS)

    def build_segments(self, wanted: np.ndarray) -> None:
        """Build only as far as the last segment ``wanted`` (a mask); the rest
        stay empty, as if they had no samples."""
        last = int(np.flatnonzero(wanted)[-1]) if wanted.any() else 0
        self.built = max(last + 1, _IP)     # voltage and pfreq cost little
        self._scratch = _empty_block(256, self.profile_width)

    @property
    def profile_width(self) -> int:
        """Columns of the profiles handed on: the segments built."""
        return int(self.layout.bounds[self.built])

    def set_code_map(self, code_map: CodeMap) -> None:
        self.code_map = code_map

    def set_text_range(self, lo: int, hi: int) -> None:
        self.text_lo, self.text_hi = np.uint64(lo), np.uint64(hi)

    def feed(self, t_ns: np.ndarray, ip: np.ndarray | None, decoded: np.ndarray,
             pid: np.ndarray | None = None) -> IntervalBlock:
        """Add a batch; return the intervals it completed, profiles normalised.
        The block is scratch space, reused by the next call.  ``pid``: each
        sample's process, whose mappings place its IP."""
        n = len(t_ns)
        bins = self._bins(n, ip, decoded, t_ns, pid)
        t_ns = np.ascontiguousarray(t_ns)
        done, start = 0, 0
        while True:
            k, start = self._run(t_ns, bins, decoded, start, _tail(self._scratch, done))
            done += k
            if start >= n:
                break
            self._scratch = _join([_head(self._scratch, done),
                                   _empty_block(len(self._scratch), self.profile_width)])
        return _head(self._scratch, done)

    def pending(self) -> IntervalBlock:
        """The trailing partial interval (not counted as complete), if any samples."""
        out = _empty_block(1, self.profile_width)
        if self.istate[_SAMPLES] == 0:
            return _head(out, 0)
        st = self.istate
        out.t_start_ns[0], out.t_end_ns[0] = st[_T_START], st[_T_LAST]
        out.instructions[0], out.cycles[0], out.samples[0] = st[_INSTR], st[_CYCLES], st[_SAMPLES]
        out.segment_samples[0] = self.seg_n
        _normalised_copy(self.acc, self.layout.bounds[:self.built + 1], self.seg_n, out.profiles[0])
        out.voltage_sum[0], out.pfreq_sum[0] = self.fstate
        return _head(out, 1)

    def _bins(self, n: int, ip, decoded, t_ns, pid=None) -> np.ndarray:
        """Each sample's bin in each segment (-1: none), one row per segment,
        and a last row with the code signature's line entry (-1: none)."""
        rows = len(SEGMENTS) + 1
        if len(self._bin_scratch) < rows * n:
            self._bin_scratch = np.empty(rows * n, np.int32)
        bins = self._bin_scratch[:rows * n].reshape(rows, n)
        bins[_LINE_ROW] = -1
        hp = self.hist
        value_bins(decoded[F_VOLT], hp.voltage_mv[0], hp.voltage_mv[1], hp.voltage_bins, bins[0])
        value_bins(decoded[F_PFREQ], hp.pfreq_mhz[0], hp.pfreq_mhz[1], hp.pfreq_bins, bins[1])
        if self.built > _IP + 1:
            value_bins(decoded[F_FREQ], hp.freq_mhz[0], hp.freq_mhz[1], hp.freq_bins, bins[_FREQ])
            value_bins(decoded[F_C0], 0.0, 1.0, hp.c0_bins, bins[_C0])
        else:
            bins[_FREQ:_LINE_ROW] = -1
        if self.built <= _IP:
            bins[2] = -1
        elif ip is not None and hp.ip_signature != "fold":
            ip, t_ns = np.ascontiguousarray(ip), np.ascontiguousarray(t_ns)
            self.code_map.bins(ip, t_ns, hp.code_region_bits, hp.code_bins, bins[2], pids=pid)
            self.code_map.bins(ip, t_ns, hp.code_line_bits, hp.code_bins, bins[_LINE_ROW],
                               pids=pid)
            bins[_LINE_ROW] += np.int32(hp.code_bins) * (bins[_LINE_ROW] >= 0)
        elif ip is not None and self.text_hi > self.text_lo:
            ip = np.where(ip >= KERNEL_START, np.uint64(0), ip)   # kernel or MISSING: unknown
            ip_bins(ip, self.text_lo, self.text_hi, self.ip_bits,
                    hp.ip_fold_groups, bins[2])
        else:
            bins[2] = -1
        return bins

    def _run(self, t_ns, bins, decoded, start, out):
        return _accumulate(
            t_ns, bins, decoded, start, self.time_mode, self.samples_mode, int(self.interval.size),
            self.layout.bounds[:self.built + 1], self.acc, self.seg_n, self.istate, self.fstate,
            out.t_start_ns, out.t_end_ns, out.instructions, out.cycles, out.samples,
            out.profiles, out.segment_samples, out.voltage_sum, out.pfreq_sum)


def _empty_block(cap: int, width: int) -> IntervalBlock:
    return IntervalBlock(
        np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int64),
        np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros((cap, width)),
        np.zeros((cap, len(SEGMENTS)), np.int64), np.zeros(cap), np.zeros(cap))


def _head(block: IntervalBlock, k: int) -> IntervalBlock:
    return IntervalBlock(*(getattr(block, f)[:k] for f in IntervalBlock.__dataclass_fields__))


def _tail(block: IntervalBlock, k: int) -> IntervalBlock:
    return IntervalBlock(*(getattr(block, f)[k:] for f in IntervalBlock.__dataclass_fields__))


def _join(blocks: list[IntervalBlock]) -> IntervalBlock:
    return IntervalBlock(*(np.concatenate([getattr(b, f) for b in blocks])
                           for f in IntervalBlock.__dataclass_fields__))


@kernel(cache=True, nogil=True)
def _accumulate(t_ns, bins, dec, start, time_mode, samples_mode, size, bounds, acc, seg_n, istate, fstate,
                o_t_start, o_t_end, o_instr, o_cycles, o_samples, o_prof, o_segn,
                o_vsum, o_fsum):
    """Add rows from ``start`` on; stop after the last row or when the output is
    full.  Returns (intervals written, next row).  Emitted profiles are
    normalised.  The state lives in locals inside the loop (the arrays could
    alias, which keeps LLVM from holding them in registers)."""
    n = len(t_ns)
    cap = len(o_t_end)
    b_v, b_f, b_ip = bounds[0], bounds[1], bounds[2]
    clocks = len(bounds) > 5        # the clock and busy-share segments are built
    b_fr, b_c0 = bounds[3] if clocks else 0, bounds[4] if clocks else 0
    started, cur, t_start = istate[_STARTED], istate[_CUR_INSTR], istate[_T_START]
    t_origin, next_t, samples = istate[_T_ORIGIN], istate[_NEXT_T], istate[_SAMPLES]
    cycles, instr, t_last = istate[_CYCLES], istate[_INSTR], istate[_T_LAST]
    n_v, n_f, n_ip = seg_n[0], seg_n[1], seg_n[2]
    n_fr, n_c0 = seg_n[3], seg_n[4]
    v_sum, f_sum = fstate[0], fstate[1]
    k = 0
    for i in range(start, n):
        t = t_ns[i]
        if started == 0:
            started, t_start, t_origin, next_t = 1, t, t, t + size
        b = bins[0, i]
        if b >= 0:
            acc[b_v + b] += 1.0
            n_v += 1
            v_sum += dec[F_VOLT, i]
        b = bins[1, i]
        if b >= 0:
            acc[b_f + b] += 1.0
            n_f += 1
            f_sum += dec[F_PFREQ, i]
        b = bins[2, i]
        if b >= 0:
            line = bins[_LINE_ROW, i]
            if line >= 0:       # two resolutions: half a sample each
                acc[b_ip + b] += 0.5
                acc[b_ip + line] += 0.5
            else:
                acc[b_ip + b] += 1.0
            n_ip += 1
        if clocks:
            b = bins[_FREQ, i]
            if b >= 0:
                acc[b_fr + b] += 1.0
                n_fr += 1
            b = bins[_C0, i]
            if b >= 0:
                acc[b_c0 + b] += 1.0
                n_c0 += 1
        d_instr = np.int64(dec[F_DINSTR, i])
        instr += d_instr
        cycles += np.int64(dec[F_DCYC, i])
        samples += 1
        t_last = t
        if time_mode:
            if t < next_t:
                continue
            next_t = t_origin + ((t - t_origin) // size + 1) * size
        else:
            cur += 1 if samples_mode else d_instr
            if cur < size:
                continue
            cur = (cur - size) % size
        o_t_start[k], o_t_end[k], o_instr[k] = t_start, t, instr
        o_cycles[k], o_samples[k] = cycles, samples
        o_vsum[k], o_fsum[k] = v_sum, f_sum
        o_segn[k, 0], o_segn[k, 1], o_segn[k, 2] = n_v, n_f, n_ip
        o_segn[k, 3], o_segn[k, 4] = n_fr, n_c0
        _normalised_copy(acc, bounds, o_segn[k], o_prof[k])
        k += 1
        t_start, instr, cycles, samples = t, 0, 0, 0
        n_v, n_f, n_ip, v_sum, f_sum = 0, 0, 0, 0.0, 0.0
        n_fr, n_c0 = 0, 0
        acc[:bounds[-1]] = 0.0
        if k == cap:
            i += 1
            break
    else:
        i = n
    istate[_STARTED], istate[_CUR_INSTR], istate[_T_START] = started, cur, t_start
    istate[_T_ORIGIN], istate[_NEXT_T], istate[_SAMPLES] = t_origin, next_t, samples
    istate[_CYCLES], istate[_INSTR], istate[_T_LAST] = cycles, instr, t_last
    seg_n[0], seg_n[1], seg_n[2] = n_v, n_f, n_ip
    seg_n[3], seg_n[4] = n_fr, n_c0
    fstate[0], fstate[1] = v_sum, f_sum
    return k, i


@kernel(cache=True, nogil=True)
def _normalised_copy(acc, bounds, counts, out):
    for s in range(len(bounds) - 1):
        scale = 1.0 / counts[s] if counts[s] > 0 else 0.0
        for j in range(bounds[s], bounds[s + 1]):
            out[j] = acc[j] * scale
