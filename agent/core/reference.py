"""A straightforward numpy implementation of the whole algorithm.

It takes all samples at once, with no state carried between batches and no
compiled kernels.  The tests hold the pipeline to it, and the replay benchmark
measures the pipeline against it.
"""

from __future__ import annotations


import numpy as np

from .batch import KERNEL_START, MISSING, SampleBatch
from .classify import classify_reference
from .codemap import code_bins_reference
from .cpumodels import MAX_PLAUSIBLE_MHZ, PLAUSIBLE_VOLTAGE_MV
from .decode import COUNTERS, FIELDS, F
from .detectors import USES_CPI, histograms_for, used_mask
from .histograms import fill_reference, ip_bins_reference
from .intervals import SEGMENTS, Layout, segment_kinds
from .params import Params
from .registers import voltage_volts


def decode(batch: SampleBatch, base_mhz: float, voltage_from_perf_status: bool = True,
           scope: str = "cpu") -> np.ndarray:
    n = len(batch)
    out = np.full((len(FIELDS), n), np.nan)
    owner = batch["cpu"] if scope == "cpu" else batch["tid"]
    deltas = {name: _deltas(batch, name, owner) for name in COUNTERS}
    if voltage_from_perf_status and "perf_status" in batch:
        status = batch["perf_status"]
        volts = voltage_volts(status)
        out[F["voltage_mv"]] = np.where((volts > 0) & (status != MISSING), volts * 1000, np.nan)
    elif not voltage_from_perf_status and "vcore_mv" in batch:
        mv = batch["vcore_mv"]
        out[F["voltage_mv"]] = np.where((mv > 0) & (mv != MISSING), mv.astype(np.float64), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        da, dm, dp, dt = deltas["aperf"], deltas["mperf"], deltas["pperf"], deltas["tsc"]
        di, dc = deltas["instructions"], deltas["cycles"]
        out[F["freq_mhz"]] = np.where(dm > 0, base_mhz * da / dm, np.nan)
        out[F["pfreq_mhz"]] = np.where(dm > 0, base_mhz * dp / dm, np.nan)
        out[F["cpi"]] = np.where(di > 0, dc / di, np.nan)
        out[F["d_instructions"]] = np.nan_to_num(di, nan=0.0)
        out[F["d_cycles"]] = np.nan_to_num(dc, nan=0.0)
        cs = {c: deltas[c] for c in ("c3", "c6", "c7")}
        ok = dt > 0
        out[F["c0"]] = np.where(ok, dm / dt, np.nan)
        for c in cs:
            out[F[c]] = np.where(ok, cs[c] / dt, np.nan)
        idle = dt - dm - sum(np.nan_to_num(v, nan=0.0) for v in cs.values())
        out[F["c1"]] = np.where(ok & ~np.isnan(dm), np.maximum(idle, 0) / dt, np.nan)
    lo, hi = PLAUSIBLE_VOLTAGE_MV
    volt = out[F["voltage_mv"]]
    volt[(volt < lo) | (volt > hi)] = np.nan
    for name in ("freq_mhz", "pfreq_mhz"):
        out[F[name]][out[F[name]] > MAX_PLAUSIBLE_MHZ] = np.nan
    return out


def _deltas(batch: SampleBatch, name: str, owner: np.ndarray) -> np.ndarray:
    d = np.full(len(batch), np.nan)
    if name not in batch:
        return d
    values = batch[name]
    for c in np.unique(owner):
        rows = np.flatnonzero(owner == c)
        v = values[rows]
        good = v[1:] != MISSING
        good &= v[:-1] != MISSING
        good &= v[1:] >= v[:-1]
        step = np.where(good, (v[1:] - np.where(good, v[:-1], 0)).astype(np.float64), np.nan)
        d[rows[1:]] = step
    return d


def interval_ends(t_ns: np.ndarray, d_instr: np.ndarray, params: Params) -> np.ndarray:
    """Index of the last sample of every complete interval."""
    iv = params.interval
    ends, i = [], 0
    if iv.kind == "time":
        origin, nxt = t_ns[0], t_ns[0] + iv.ns
        while True:
            i = int(np.searchsorted(t_ns, nxt, side="left"))
            if i >= len(t_ns):
                break
            ends.append(i)
            nxt = origin + ((t_ns[i] - origin) // iv.ns + 1) * iv.ns
        return np.array(ends, np.int64)
    if iv.kind == "samples":
        return np.arange(iv.samples - 1, len(t_ns), iv.samples, dtype=np.int64)
    total = np.cumsum(d_instr.astype(np.int64))
    carried = 0
    while True:
        i = int(np.searchsorted(total, carried + iv.instructions, side="left"))
        if i >= len(total):
            break
        ends.append(i)
        over = (total[i] - carried) - iv.instructions
        carried = total[i] - over % iv.instructions
    return np.array(ends, np.int64)


def profiles(batch: SampleBatch, decoded: np.ndarray, ends: np.ndarray, params: Params,
             text_range, mappings=None) -> tuple[np.ndarray, np.ndarray]:
    hp = histograms_for(params.detector.detector, params.histograms)
    layout = Layout.of(hp)
    starts = np.concatenate([[0], ends[:-1] + 1])
    prof = np.zeros((len(ends), layout.width))
    counts = np.zeros((len(ends), len(SEGMENTS)), np.int64)
    ip_bins, line_bins = None, None
    if "ip" in batch and hp.ip_signature != "fold":
        ip_bins = code_bins_reference(batch["ip"], batch["t_ns"], mappings, hp.code_region_bits,
                                      hp.code_bins, batch.get("pid"))
        line_bins = code_bins_reference(batch["ip"], batch["t_ns"], mappings, hp.code_line_bits,
                                        hp.code_bins, batch.get("pid"))
    elif "ip" in batch and text_range is not None:
        bits = int(hp.ip_bins).bit_length() - 1
        ips = np.where(batch["ip"] >= KERNEL_START, np.uint64(0), batch["ip"])
        ip_bins = ip_bins_reference(ips, text_range[0], text_range[1], bits, hp.ip_fold_groups)
    for k, (a, b) in enumerate(zip(starts, ends + 1)):
        volt = decoded[F["voltage_mv"], a:b]
        pf = decoded[F["pfreq_mhz"], a:b]
        hv = fill_reference(volt, *hp.voltage_mv, hp.voltage_bins)
        hf = fill_reference(pf, *hp.pfreq_mhz, hp.pfreq_bins)
        hc = fill_reference(decoded[F["freq_mhz"], a:b], *hp.freq_mhz, hp.freq_bins)
        h0 = fill_reference(decoded[F["c0"], a:b], 0.0, 1.0, hp.c0_bins)
        hi = np.zeros(hp.ip_entries)
        if line_bins is not None:       # regions, then lines, half a sample each
            sel = ip_bins[a:b]
            hi = np.concatenate([np.bincount(sel[sel >= 0], minlength=hp.code_bins),
                                 np.bincount(line_bins[a:b][sel >= 0], minlength=hp.code_bins)])
            hi = hi.astype(np.float64) / 2
        elif ip_bins is not None:
            sel = ip_bins[a:b]
            hi = np.bincount(sel[sel >= 0], minlength=hp.ip_entries).astype(np.float64)
        for s, h in enumerate((hv, hf, hi, hc, h0)):
            counts[k, s] = int(h.sum())
            if counts[k, s]:
                prof[k, layout.bounds[s]:layout.bounds[s + 1]] = h / h.sum()
    return prof, counts


def detect(batch: SampleBatch, params: Params, base_mhz: float, text_range=None, mappings=None):
    """Phases of every complete interval: (phase, distance, new_phase, ends).
    ``mappings`` as in trace metadata (None: a trace without them)."""
    decoded = decode(batch, base_mhz)
    ends = interval_ends(batch["t_ns"], decoded[F["d_instructions"]], params)
    prof, counts = profiles(batch, decoded, ends, params, text_range or params.histograms.text_range,
                            mappings)
    hp = histograms_for(params.detector.detector, params.histograms)
    layout, kinds = Layout.of(hp), segment_kinds(hp)
    tolerance = params.detector.cpi_tolerance if params.detector.detector in USES_CPI else 0.0
    phase, dist, new, _ = classify_reference(prof, counts, layout.bounds, kinds,
                                             used_mask(params.detector.detector),
                                             params.detector, interval_cpi(decoded, ends),
                                             tolerance)
    return phase, dist, new, ends


def interval_cpi(decoded: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each interval's log CPI from its counted cycles and instructions; NaN
    where either is not counted."""
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    instr = np.array([decoded[F["d_instructions"], a:b + 1].sum() for a, b in zip(starts, ends)])
    cycles = np.array([decoded[F["d_cycles"], a:b + 1].sum() for a, b in zip(starts, ends)])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((instr > 0) & (cycles > 0), np.log(cycles / instr), np.nan)
