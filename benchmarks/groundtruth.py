"""Held-out detection: phasewatch against SimPoint's method on real programs.

    python benchmarks/groundtruth.py --workdir DIR [--no-valgrind] [NAME ...]
        [--samples 10,30,100] [--half tuning|test|unseen|both|all] [--detector vpf-ip]
        [--set FIELD=VALUE ...] [--seeds 3] [--jobs N] [--simpoint PATH] [--json FILE]

Workloads (groundtruth_workloads.py): 16 programs, 15 of them on two inputs
each (NAME-INPUT), split by program into a fixed tuning half, test half and
unseen set (``HALVES`` there):

- tuning half: bzip2, xz-T2 (compressors), perl (interpreter), sqlite3
  (database), as (assembler), kvloop (a C request loop), closefns (control)
- test half: gzip, zstd (compressors), python3 (interpreter), cc1 (compiler),
  node (JIT), grep (regular expressions)
- unseen: sort, awk (mawk), bc: written after every setting was chosen.

Choose detector settings on the tuning half (groundtruth_sweep.py runs a grid
over it); the test half is the figure to report, and the unseen set checks
it.  ``--half both`` is the tuning and test halves, ``all`` adds the unseen
set.  The test half's table is printed first, then the unseen set's; the
tuning half's follows, labelled so.

1. valgrind exp-bbv, 100M-instruction intervals: basic-block vectors and the
   block addresses; valgrind's --trace-symtab log gives each object's
   executable mapping.  callgrind with cache and branch simulation, dumped
   every 2M blocks, gives the CPI model (below).  (groundtruth_build.py;
   outputs kept in DIR and reused; ``--no-valgrind`` runs nothing new.)
2. Reference labels: SimPoint's method, phasewatch.simpoint.method on
   scikit-learn (15-d random projection, k-means for k = 1..10 from 5 seeds,
   BIC, the smallest k within 90 % of the BIC range).  With ``--simpoint
   PATH``, SimPoint 3.2's own binary instead: the BBV of the intervals
   written in SimPoint's .bb format and run as ``PATH -loadFVFile F -maxK 10
   -saveLabels L -saveSimpoints S -saveSimpointWeights W``, its defaults
   otherwise (15-d projection, 5 seeds, BIC threshold 0.9, binary search
   over k).  Cached in DIR/NAME/simpoint32.
3. IP traces as a sampler sees them, one per (workload, density, condition,
   seed), cached in DIR/NAME/traces.  Each interval gets D samples (D = 10,
   30, 100: ``--samples``; 30, one every 3.3M instructions, is what a 1 kHz
   cpu-clock sampler gives on a 3.3 GHz core at IPC 1, the headline).  Each
   sample's block is drawn from the interval's blocks in proportion to the
   instructions they retired; then
   - an instruction inside the block, uniformly: a block's instruction count
     is the greatest common divisor of its per-interval counts in the .bb
     file (each is entries x instructions; taken when at most 64), and its
     byte length the distance to the next block's start, at most 4 bytes an
     instruction (at most 64 bytes when its count is unknown); the IP is
     start + (k / n) x length for an instruction k drawn from 0..n-1;
   - skid: with probability 0.5 the IP moves forward by a further
     1 + Geometric(0.5) instructions (mean 2) of 4 bytes each, as an
     interrupt lands a few instructions after the one it was raised on; it
     may leave the block (into the bytes that follow it, a simplification:
     skid past a taken branch lands at its target).
   The samples' instruction counts are exact and evenly spaced, so replay
   cuts exactly the intervals SimPoint labelled.  The executable mappings go
   in the metadata; code valgrind saw in no object (a JIT's) gets an
   anonymous mapping per 256 KiB-aligned span, as /proc/PID/maps shows it.
   Two conditions, the same IPs in both:
   - "PMU": cycles from the CPI model, so the detector's CPI gate sees each
     interval's CPI; t_ns is cycles at a nominal 3 GHz.
   - "IP-only": every cycle count 0 (phasewatch's "not counted": CPI
     unknown), and t_ns is instructions at a nominal 3 GHz, so that time
     carries no CPI either.
4. phasewatch labels each trace in this process (its own pipeline, as
   ``phasewatch replay TRACE --detector D`` builds it; checked once per run
   against that command), with ``--set FIELD=VALUE`` overriding any field of
   phasewatch.core.params.DetectorParams.
5. Scores against the CPI model, which the IP-only detector never sees:
   - the thesis's homogeneity, mean per-phase CoV of CPI, a one-interval
     phase counting as the whole run's CoV (cli.eval.cpi_cov_quality), as a
     ratio to SimPoint's on the same intervals (CoV/SP: lower is better,
     1.00 as homogeneous as SimPoint);
   - ARI against SimPoint's labels, phases, phases of one interval;
   - baselines: one phase; as many consecutive equal chunks as SimPoint's k.
   Each workload's figures are the means over ``--seeds`` traces (default 3;
   seeds differ in the IPs drawn only).
   Summaries per half, condition and density: the mean ratio over the
   workloads, the worst workload, and the share of one-interval phases among
   all phases.

CPI model (no PMU here): cycles = Ir + 10 * (I1 misses + D1 misses)
+ 100 * (last-level misses) + 15 * (mispredicted branches), from callgrind's
simulated caches (its defaults for this host) and branch predictor.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from groundtruth_build import argv, build, paths  # noqa: E402
from groundtruth_workloads import HALVES, WORKLOADS, available, half  # noqa: E402

INTERVAL = 100_000_000
DENSITIES = (10, 30, 100)
HEADLINE = 30
CONDITIONS = ("pmu", "ip-only")
CONDITION_NAMES = {"pmu": "PMU", "ip-only": "IP-only"}
#: Bumped whenever the traces' model changes: older cached traces are ignored.
TRACE_VERSION = 2
PREPARED_VERSION = 1
#: The sampler model (see the docstring).
SKID_PROBABILITY = 0.5
SKID_GEOMETRIC_P = 0.5
INSTRUCTION_BYTES = 4
MAX_BLOCK_INSTRUCTIONS = 64
UNKNOWN_BLOCK_BYTES = 64
#: Generated code is given anonymous mappings of this alignment.
JIT_SPAN = 256 << 10
NOMINAL_GHZ = 3.0
PHASEWATCH = os.path.join(os.path.dirname(sys.executable), "phasewatch")
#: CPI model weights: cycles per event on top of one per instruction.
L1_MISS, LL_MISS, MISPREDICT = 10, 100, 15
#: Rates per instruction from callgrind's events that are not the CPI.
RATES = {"d1_miss": ("D1mr", "D1mw"), "mispredict": ("Bcm", "Bim"), "access": ("Dr", "Dw"),
         "branch": ("Bc", "Bi")}


# ------------------------------------------------------------ valgrind outputs

def callgrind_per_interval(cg_prefix: str, instructions: np.ndarray,
                           thread: int | None = None) -> dict[str, np.ndarray]:
    """Per-interval CPI of the model, and each of :data:`RATES` per
    instruction, pieced from the callgrind dumps: each dump's events are
    spread evenly over its instructions.  While callgrind has not finished,
    intervals past its last dump are NaN (left out of the homogeneity figures)."""
    parts = []
    for path in glob.glob(cg_prefix + "*"):
        if path.endswith(".done"):
            continue
        # --separate-threads=yes: one file per thread, named ...-NN
        m = re.search(r"-(\d+)$", path)
        if thread is not None and (m is None or int(m[1]) != thread):
            continue
        part, events, totals = None, None, None
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("part:"):
                    part = int(line.split()[1])
                elif line.startswith("events:"):
                    events = line.split()[1:]
                elif line.startswith("totals:") or line.startswith("summary:"):
                    totals = [int(x) for x in line.split()[1:]]
        if events is None or totals is None:
            continue
        v = dict(zip(events, totals + [0] * (len(events) - len(totals))))
        cycles = (v["Ir"] + L1_MISS * (v["I1mr"] + v["D1mr"] + v["D1mw"])
                  + LL_MISS * (v["ILmr"] + v["DLmr"] + v["DLmw"]) + MISPREDICT * (v["Bcm"] + v["Bim"]))
        parts.append((part or 0, v["Ir"], cycles,
                      *(sum(v.get(e, 0) for e in events_) for events_ in RATES.values())))
    names = ("cpi",) + tuple(RATES)
    if not parts:
        return {name: np.full(len(instructions), np.nan) for name in names}
    parts.sort()
    table = np.array([p[1:] for p in parts], np.float64)
    edges_ir = np.concatenate([[0.0], np.cumsum(table[:, 0])])
    bounds = np.concatenate([[0], np.cumsum(instructions)]).astype(np.float64)
    if os.path.exists(cg_prefix + ".done"):
        bounds *= edges_ir[-1] / bounds[-1]
    unknown = bounds[1:] > edges_ir[-1] * (1 + 1e-9)
    out = {}
    for k, name in enumerate(names):
        edges = np.concatenate([[0.0], np.cumsum(table[:, k + 1])])
        rate = np.diff(np.interp(bounds, edges_ir, edges)) / np.diff(bounds)
        rate[unknown] = np.nan
        out[name] = rate
    return out


def busiest_thread(bb_path: str):
    """exp-bbv writes thread 1 to the file named and thread N to FILE.N: the
    thread that ran the most intervals, and its number."""
    from phasewatch.formats.bbvfile import looks_like_bb, read_bb
    files = {1: bb_path}
    for f in glob.glob(bb_path + ".*"):
        if f.rsplit(".", 1)[1].isdigit():
            files[int(f.rsplit(".", 1)[1])] = f
    loaded = {t: read_bb(f) for t, f in files.items() if looks_like_bb(f)}
    thread = max(loaded, key=lambda t: len(loaded[t]))
    return loaded[thread], thread


def jit_mappings(addr: np.ndarray, mappings: list[dict]) -> list[dict]:
    """Anonymous mappings for the blocks outside every object valgrind listed."""
    starts = np.array([m["start"] for m in mappings], np.uint64)
    ends = np.array([m["end"] for m in mappings], np.uint64)
    addr = addr[addr > 0]
    inside = ((addr[:, None] >= starts[None, :]) & (addr[:, None] < ends[None, :])).any(axis=1) \
        if len(starts) else np.zeros(len(addr), bool)
    spans = np.unique(addr[~inside] // np.uint64(JIT_SPAN))
    return [{"start": int(s) * JIT_SPAN, "end": (int(s) + 1) * JIT_SPAN, "offset": 0, "path": ""}
            for s in spans if int(s) > 0]


def block_shapes(counts, addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each block's instruction count (0: unknown) and byte length (see the
    docstring)."""
    csc = counts.tocsc()
    n_blocks = counts.shape[1]
    ninstr = np.zeros(n_blocks, np.int64)
    for b in range(n_blocks):
        col = csc.data[csc.indptr[b]:csc.indptr[b + 1]].astype(np.int64)
        if len(col):
            g = int(np.gcd.reduce(col))
            ninstr[b] = g if g <= MAX_BLOCK_INSTRUCTIONS else 0
    order = np.argsort(addr, kind="stable")
    sorted_addr = addr[order].astype(np.int64)
    nxt = np.empty(len(sorted_addr), np.int64)
    # the next distinct start above each one
    uniq, first = np.unique(sorted_addr, return_index=True)
    pos = np.searchsorted(uniq, sorted_addr, side="right")
    nxt = np.where(pos < len(uniq), uniq[np.minimum(pos, len(uniq) - 1)] - sorted_addr,
                   UNKNOWN_BLOCK_BYTES)
    gap = np.empty(len(addr), np.int64)
    gap[order] = nxt
    cap = np.where(ninstr > 0, ninstr * INSTRUCTION_BYTES, UNKNOWN_BLOCK_BYTES)
    length = np.maximum(np.minimum(gap, cap), 1)
    return ninstr, length


def prepare(w, workdir: str, simpoint_bin: str | None = None) -> dict:
    """What the scoring needs of a workload's valgrind outputs, cached in
    DIR/NAME/prepared-*.npz (recomputed when the outputs change): the
    intervals' block counts, the CPI model, SimPoint's labels, the mappings."""
    import scipy.sparse as sp_
    p = paths(workdir, w)
    stamp = [os.path.getmtime(f) for f in (p["bb"], p["cg"] + ".done") if os.path.exists(f)]
    cache = os.path.join(p["dir"], f"prepared-v{PREPARED_VERSION}.npz")
    meta_path = cache[:-4] + ".json"
    if os.path.exists(cache) and os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta["stamp"] == stamp:
            z = np.load(cache)
            counts = sp_.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
            prep = dict(meta, counts=counts, addr=z["addr"], ninstr=z["ninstr"], length=z["length"],
                        truth=z["truth"], per_interval={k[3:]: z[k] for k in z.files
                                                        if k.startswith("pi_")})
            return with_reference(prep, w, p, simpoint_bin)
    import warnings
    from sklearn.exceptions import ConvergenceWarning
    from phasewatch.formats.bbvfile import read_pc, read_symtab_mappings
    from phasewatch.simpoint.method import simpoint
    warnings.filterwarnings("ignore", category=ConvergenceWarning)   # k above the distinct points
    bb, thread = busiest_thread(p["bb"])
    # exp-bbv's last interval is the remainder: leave it out, as replay does
    full = bb.counts.tocsr()
    counts = full[:-1] if bb.instructions[-1] < INTERVAL else full
    n = counts.shape[0]
    per_interval = {name: v[:n] for name, v in callgrind_per_interval(
        p["cg"], np.asarray(full.sum(axis=1)).ravel(),
        thread if w.threads > 1 else None).items()}
    pcs = read_pc(p["pc"])
    addr = np.zeros(counts.shape[1], np.uint64)
    for bid, (a, _) in pcs.items():
        if bid < len(addr):
            addr[bid] = a
    ninstr, length = block_shapes(full, addr)
    mappings = read_symtab_mappings(p["vglog"])
    mappings += jit_mappings(addr, mappings)
    program = argv(w, p)[0]
    exe = os.path.realpath(program if os.path.isabs(program)
                           else subprocess.run(["which", program], capture_output=True,
                                               text=True).stdout.strip())
    sp = simpoint(counts)
    meta = {"stamp": stamp, "name": w.name, "thread": thread, "intervals": n, "k": int(sp.k),
            "mappings": mappings, "exe": exe,
            "cpi_known": float(np.mean(~np.isnan(per_interval["cpi"])))}
    tmp = f"{cache}.{os.getpid()}.tmp.npz"
    np.savez(tmp, data=counts.data, indices=counts.indices, indptr=counts.indptr,
             shape=np.array(counts.shape), addr=addr, ninstr=ninstr, length=length,
             truth=sp.labels, **{"pi_" + k: v for k, v in per_interval.items()})
    os.replace(tmp, cache)
    with open(meta_path + f".{os.getpid()}", "w") as f:
        json.dump(meta, f)
    os.replace(meta_path + f".{os.getpid()}", meta_path)
    prep = dict(meta, counts=counts, addr=addr, ninstr=ninstr, length=length, truth=sp.labels,
                per_interval=per_interval)
    return with_reference(prep, w, p, simpoint_bin)


def with_reference(prep: dict, w, p: dict, simpoint_bin: str | None) -> dict:
    """The reference labels: SimPoint 3.2's binary's when one is given."""
    prep["reference"] = "SimPoint method (scikit-learn)"
    if simpoint_bin:
        from sklearn.metrics import adjusted_rand_score
        method = prep["truth"]
        prep["truth"] = simpoint_binary_labels(simpoint_bin, prep["counts"], p["dir"])
        prep["method_labels"] = method
        prep["method_k"] = int(len(np.unique(method)))
        prep["method_ari"] = float(adjusted_rand_score(prep["truth"], method))
        prep["k"] = int(len(np.unique(prep["truth"])))
        prep["reference"] = f"SimPoint 3.2 ({simpoint_bin})"
    return prep


def simpoint_binary_labels(binary: str, counts, workdir: str) -> np.ndarray:
    """SimPoint 3.2's labels of the intervals (cached by the binary's path
    and modification time)."""
    d = os.path.join(workdir, "simpoint32")
    os.makedirs(d, exist_ok=True)
    key = f"{os.path.realpath(binary)}:{os.path.getmtime(binary)}:{counts.shape}"
    labels_path, key_path = os.path.join(d, "labels"), os.path.join(d, "key")
    if os.path.exists(labels_path) and os.path.exists(key_path) and open(key_path).read() == key:
        return read_simpoint_labels(labels_path)
    bb = os.path.join(d, "intervals.bb")
    with open(bb, "w") as f:
        for i in range(counts.shape[0]):
            row = counts.getrow(i)
            f.write("T" + "".join(f":{b + 1}:{c} " for b, c in zip(row.indices, row.data)) + "\n")
    subprocess.run([binary, "-loadFVFile", bb, "-maxK", "10", "-saveLabels", labels_path,
                    "-saveSimpoints", os.path.join(d, "simpoints"),
                    "-saveSimpointWeights", os.path.join(d, "weights")],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(key_path, "w") as f:
        f.write(key)
    return read_simpoint_labels(labels_path)


def read_simpoint_labels(path: str) -> np.ndarray:
    with open(path) as f:
        return np.array([int(line.split()[0]) for line in f if line.strip()], np.int64)


# ------------------------------------------------------------ IP traces

def trace_path(workdir: str, name: str, density: int, condition: str, seed: int) -> str:
    """The cached trace, named after the valgrind outputs' times (a rerun of
    valgrind makes new traces)."""
    w = next(w for w in WORKLOADS if w.name == name)
    p = paths(workdir, w)
    stamp = int(max(os.path.getmtime(f) for f in (p["bb"], p["cg"] + ".done")
                    if os.path.exists(f)))
    return os.path.join(workdir, name, "traces",
                        f"v{TRACE_VERSION}-{stamp}-s{density}-{condition}-seed{seed}.arrow")


def draw_ips(prep: dict, density: int, seed: int) -> np.ndarray:
    """``density`` IPs for each interval (see the docstring), and one first
    IP for the sample at zero."""
    rng = np.random.default_rng([seed, density])
    counts, addr = prep["counts"], prep["addr"].astype(np.int64)
    ninstr, length = prep["ninstr"], prep["length"]
    out = [addr[counts.indices[counts.indptr[0]:counts.indptr[0] + 1]]]
    for i in range(counts.shape[0]):
        lo, hi = counts.indptr[i], counts.indptr[i + 1]
        idx, w = counts.indices[lo:hi], counts.data[lo:hi].astype(np.float64)
        blocks = idx[rng.choice(len(idx), density, p=w / w.sum())]
        n = np.maximum(ninstr[blocks], 1)
        known = ninstr[blocks] > 0
        k = np.floor(rng.random(density) * n)
        offset = np.where(known, np.floor(k / n * length[blocks]),
                          np.floor(rng.random(density) * length[blocks]))
        skid = np.where(rng.random(density) < SKID_PROBABILITY,
                        rng.geometric(SKID_GEOMETRIC_P, density) * INSTRUCTION_BYTES, 0)
        out.append(addr[blocks] + offset.astype(np.int64) + skid)
    return np.concatenate(out).astype(np.uint64)


def write_trace(prep: dict, density: int, condition: str, seed: int, path: str) -> None:
    from phasewatch.core.batch import SampleBatch
    from phasewatch.core.params import IntervalParams
    from phasewatch.formats import metadata as md
    from phasewatch.formats.trace import TraceWriter
    n = prep["intervals"]
    cpi = prep["per_interval"]["cpi"]
    cpi = np.where(np.isnan(cpi), np.nanmean(cpi) if (~np.isnan(cpi)).any() else 1.0, cpi)
    ip = draw_ips(prep, density, seed)
    step = np.arange(1, density + 1, dtype=np.int64) * INTERVAL // density
    instructions = np.concatenate([[0], (np.arange(n, dtype=np.int64)[:, None] * INTERVAL
                                         + step[None, :]).ravel()]).astype(np.uint64)
    if condition == "pmu":
        done_c = np.concatenate([[0.0], np.cumsum(INTERVAL * cpi)])[:n]
        cyc = np.concatenate([[0.0], (done_c[:, None] + step[None, :] * cpi[:, None]).ravel()])
        cycles = cyc.astype(np.uint64)
        t_ns = (cyc / NOMINAL_GHZ).astype(np.int64)
    else:
        cycles = np.zeros(len(instructions), np.uint64)
        t_ns = (instructions.astype(np.float64) / NOMINAL_GHZ).astype(np.int64)
    m = len(ip)
    mappings = prep["mappings"]
    text = next(([m_["start"], m_["end"]] for m_ in mappings if m_["path"] == prep["exe"]), None)
    signals = ("t_ns", "cpu", "tid", "ip", "instructions", "cycles")
    meta = md.new(base_freq_mhz=NOMINAL_GHZ * 1000, signals={s: "valgrind" for s in signals},
                  interval=IntervalParams(instructions=INTERVAL), text_range=text,
                  mappings=mappings, counter_scope="thread",
                  source=f"valgrind exp-bbv blocks, {density} IPs an interval drawn by "
                         f"benchmarks/groundtruth.py ({CONDITION_NAMES[condition]}, seed {seed})")
    meta["histograms"]["text_range"] = text
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp.arrow"
    with TraceWriter(tmp, meta, signals) as w:
        w.write(SampleBatch({"t_ns": t_ns, "cpu": np.zeros(m, np.int32),
                             "tid": np.ones(m, np.int32), "ip": ip,
                             "instructions": instructions, "cycles": cycles}))
    os.replace(tmp, path)


# ------------------------------------------------------------ labelling

def parse_sets(sets: list[str]) -> dict:
    """``FIELD=VALUE`` strings to DetectorParams overrides, cast to each
    field's type."""
    from phasewatch.core.params import DetectorParams
    types = {f.name: (f.type if isinstance(f.type, str) else f.type.__name__)
             for f in dataclasses.fields(DetectorParams)}
    out = {}
    for s in sets:
        name, sep, value = s.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in types:
            raise SystemExit(f"--set {s}: give FIELD=VALUE, FIELD one of {', '.join(types)}")
        t = types[name]
        if t == "bool":
            out[name] = value.strip().lower() in ("1", "true", "yes", "on")
        elif t == "int":
            out[name] = int(float(value))
        elif t == "float":
            out[name] = float(value)
        else:
            out[name] = value
    return out


def label_trace(path: str, detector: str, overrides: dict) -> np.ndarray:
    """The phase of each complete interval, by phasewatch's own pipeline, in
    this process: the trace's settings as ``phasewatch replay`` fits them
    (settings.pipeline_for), the DetectorParams fields in ``overrides`` replaced."""
    from phasewatch.core.driver import Driver
    from phasewatch.core.params import interval_params_of
    from phasewatch.core.pipeline import Pipeline
    from phasewatch.core.settings import DetectionSettings
    from phasewatch.formats.results import PhaseSummary
    from phasewatch.formats.tracefiles import open_trace
    warnings: list[str] = []
    source = open_trace(path, warn=warnings.append)
    try:
        meta = source.metadata
        settings = DetectionSettings.given({"detector": detector}, meta.get("detection"))
        signals = tuple(meta.get("signals") or source.signals)
        fitted = settings.for_stream(signals, warnings.append,
                                     default_interval=interval_params_of(meta))
        params = fitted.params(meta)
        if overrides:
            params = dataclasses.replace(params, detector=dataclasses.replace(params.detector,
                                                                              **overrides))
        pipeline = Pipeline.for_trace(meta, params)
        summary = PhaseSummary(keep_phases=True)
        if hasattr(source, "read_only"):
            source.read_only(pipeline.columns)
        driver = Driver(pipeline, [summary])
        driver.run(source.batches())
        driver.finish()
        driver.close()
    finally:
        source.close()
    return np.asarray(summary.phase_labels(), np.int64)


def cli_labels(trace: str, detector: str) -> np.ndarray:
    """``phasewatch replay TRACE --detector D --output X``'s phases."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "phases.jsonl")
        subprocess.run([PHASEWATCH, "replay", trace, "--detector", detector, "--output", out],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return np.array([json.loads(line)["phase"] for line in f], np.int64)


def _init_worker():
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def _prepare_task(args):
    name, workdir, simpoint_bin = args
    w = next(w for w in WORKLOADS if w.name == name)
    prep = prepare(w, workdir, simpoint_bin)
    return name, prep


def _trace_task(args):
    workdir, name, density, condition, seed, simpoint_bin = args
    path = trace_path(workdir, name, density, condition, seed)
    if not os.path.exists(path):
        w = next(w for w in WORKLOADS if w.name == name)
        write_trace(prepare(w, workdir, simpoint_bin), density, condition, seed, path)
    return path


def _label_task(args):
    key, path, detector, overrides = args
    return key, label_trace(path, detector, overrides)


class Pool:
    """A process pool of ``jobs`` workers (spawned: no state shared with
    numba or BLAS threads of this process), or this process for 1."""

    def __init__(self, jobs: int):
        self.pool = (multiprocessing.get_context("spawn").Pool(jobs, initializer=_init_worker)
                     if jobs > 1 else None)

    def map(self, fn, tasks):
        if self.pool is None or len(tasks) <= 1:
            return [fn(t) for t in tasks]
        return self.pool.map(fn, tasks, chunksize=1)

    def close(self):
        if self.pool is not None:
            self.pool.close()
            self.pool.join()


# ------------------------------------------------------------ scoring

def score(truth: np.ndarray, labels: np.ndarray, per_interval: dict[str, np.ndarray]) -> dict:
    from sklearn.metrics import adjusted_rand_score
    from phasewatch.cli.eval import cpi_cov_quality
    _, sizes = np.unique(labels, return_counts=True)
    return {"phases": int(len(sizes)), "one_interval": int((sizes == 1).sum()),
            "ari": float(adjusted_rand_score(truth, labels)),
            "cpi_cov": cpi_cov_quality(labels, per_interval["cpi"]),
            "access_cov": cpi_cov_quality(labels, per_interval["access"])}


def chunks(n: int, k: int) -> np.ndarray:
    return (np.arange(n) * k // n).astype(np.int64)


#: The order the halves are printed in: the figures to read first.
HALF_ORDER = ("test", "unseen", "tuning")

def select(names=(), which: str = "both", workdir: str | None = None,
           need_outputs: bool = False) -> list:
    out = []
    for w in WORKLOADS:
        if names and w.name not in names and w.program not in names:
            continue
        if which not in (half(w), "all") and not (which == "both" and half(w) != "unseen"):
            continue
        why = available(w)
        if why:
            print(f"skipping {w.name}: {why}", file=sys.stderr)
            continue
        if need_outputs:
            p = paths(workdir, w)
            if not (os.path.exists(p["bb"]) and os.path.exists(p["cg"] + ".done")):
                print(f"skipping {w.name}: no complete valgrind output in {workdir}",
                      file=sys.stderr)
                continue
        out.append(w)
    return out


def evaluate(workloads: list, workdir: str, densities, conditions, seeds: int, runs: list[dict],
             pool: Pool, simpoint_bin: str | None = None, check_cli: bool = True,
             log=print) -> dict:
    """Scores of every (run, workload, density, condition, seed); ``runs`` are
    {"detector", "overrides"} settings, labelled over the same cached traces.
    Returns {"prepared": {name: summary}, "runs": [{...,"scores": {...}}]}."""
    t0 = time.time()
    names = [w.name for w in workloads]
    preps = dict(pool.map(_prepare_task, [(n, workdir, simpoint_bin) for n in names]))
    t1 = time.time()
    keys = [(n, d, c, s) for n in names for d in densities for c in conditions for s in range(seeds)]
    paths_ = pool.map(_trace_task, [(workdir, n, d, c, s, simpoint_bin) for n, d, c, s in keys])
    traces = dict(zip(keys, paths_))
    t2 = time.time()
    tasks = [((r, key), traces[key], run["detector"], run["overrides"])
             for r, run in enumerate(runs) for key in keys]
    labelled = dict(pool.map(_label_task, tasks))
    t3 = time.time()
    if check_cli and keys:
        key = keys[0]
        mine = labelled[(0, key)] if not runs[0]["overrides"] else \
            label_trace(traces[key], runs[0]["detector"], {})
        theirs = cli_labels(traces[key], runs[0]["detector"])
        n = preps[key[0]]["intervals"]
        if not np.array_equal(mine[:n], theirs[:n]):
            raise SystemExit(f"in-process labels differ from `phasewatch replay` on {traces[key]}")
        log(f"check: in-process labels equal `phasewatch replay {traces[key]} --detector "
            f"{runs[0]['detector']}`'s ({n} intervals)")
    out_runs = []
    for r, run in enumerate(runs):
        scores = {}
        for key in keys:
            name = key[0]
            prep = preps[name]
            n = prep["intervals"]
            labels = labelled[(r, key)][:n]
            if len(labels) < n:
                raise SystemExit(f"{traces[key]}: {len(labels)} intervals labelled, {n} expected")
            scores["|".join(map(str, key))] = score(prep["truth"], labels, prep["per_interval"]) \
                | {"labels": labels.tolist()}
        out_runs.append(dict(run, scores=scores))
    prepared = {}
    for name, prep in preps.items():
        n, truth, pi = prep["intervals"], prep["truth"], prep["per_interval"]
        prepared[name] = {
            "half": half(next(w for w in WORKLOADS if w.name == name)),
            "intervals": n, "k": prep["k"], "thread": prep["thread"], "reference": prep["reference"],
            "cpi_known": prep["cpi_known"], "truth": truth.tolist(),
            **{k: prep[k] for k in ("method_k", "method_ari") if k in prep},
            "simpoint": score(truth, truth, pi),
            "one_phase": score(truth, np.zeros(n, np.int64), pi),
            "chunks": score(truth, chunks(n, prep["k"]), pi)}
        if "method_ari" in prep:
            prepared[name]["simpoint_method_ratio"] = (score(truth, prep["method_labels"],
                                                             pi)["cpi_cov"]
                                                       / prepared[name]["simpoint"]["cpi_cov"])
    timing = {"prepare_s": t1 - t0, "traces_s": t2 - t1, "label_s": t3 - t2,
              "replays": len(tasks)}
    return {"prepared": prepared, "runs": out_runs, "timing": timing}


def aggregate(result: dict, run: int, names: list[str], density: int, condition: str,
              seeds: int) -> dict[str, dict]:
    """Per workload, the scores averaged over seeds, ratios to SimPoint's."""
    out = {}
    scores = result["runs"][run]["scores"]
    for name in names:
        ref = result["prepared"][name]["simpoint"]
        rows = [scores[f"{name}|{density}|{condition}|{s}"] for s in range(seeds)]
        out[name] = {
            "ratio": float(np.mean([r["cpi_cov"] / ref["cpi_cov"] for r in rows])),
            "access_ratio": float(np.mean([r["access_cov"] / ref["access_cov"] for r in rows])),
            "ari": float(np.mean([r["ari"] for r in rows])),
            "phases": float(np.mean([r["phases"] for r in rows])),
            "one_interval": float(np.mean([r["one_interval"] for r in rows]))}
    return out


def summary_of(agg: dict[str, dict]) -> dict:
    if not agg:
        return {}
    ratios = {n: a["ratio"] for n, a in agg.items()}
    worst = max(ratios, key=lambda n: ratios[n])
    phases = sum(a["phases"] for a in agg.values())
    single = sum(a["one_interval"] for a in agg.values())
    return {"workloads": len(agg), "mean_ratio": float(np.mean(list(ratios.values()))),
            "worst": worst, "worst_ratio": ratios[worst],
            "within_1_5": int(sum(r <= 1.5 for r in ratios.values())),
            "phases": phases, "one_interval": single,
            "one_interval_share": single / phases if phases else math.nan}


def fmt(x: float, digits: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def print_half(result: dict, run: int, names: list[str], title: str, densities, conditions,
               seeds: int, headline: int) -> None:
    prepared = result["prepared"]
    note = " (settings may be fitted to it)" if title == "tuning half" else ""
    print(f"\n### {title}{note}: {len(names)} workloads, {headline} samples an interval\n")
    head = "| workload | intervals | SimPoint k | SimPoint CoV |"
    rule = "|---|---|---|---|"
    for c in conditions:
        cn = CONDITION_NAMES[c]
        head += f" {cn} phases | {cn} 1-int | {cn} ARI | {cn} CoV/SP |"
        rule += "---|---|---|---|"
    head += " one phase CoV/SP | k chunks CoV/SP |"
    rule += "---|---|"
    print(head)
    print(rule)
    aggs = {c: aggregate(result, run, names, headline, c, seeds) for c in conditions}
    for name in names:
        p = prepared[name]
        sp = p["simpoint"]["cpi_cov"]
        label = name + (f" (thread {p['thread']})" if p["thread"] != 1 else "")
        line = f"| {label} | {p['intervals']} | {p['k']} | {fmt(sp, 4)} |"
        for c in conditions:
            a = aggs[c][name]
            line += (f" {a['phases']:.3g} | {a['one_interval']:.3g} | {fmt(a['ari'], 3)} | "
                     f"{fmt(a['ratio'])} |")
        line += (f" {fmt(p['one_phase']['cpi_cov'] / sp)} | {fmt(p['chunks']['cpi_cov'] / sp)} |")
        print(line)
        if "method_ari" in p:
            print(f"| {name} | SimPoint method (scikit-learn) beside SimPoint 3.2: k {p['method_k']}, "
                  f"ARI {p['method_ari']:.3f}, CoV/SP {p['simpoint_method_ratio']:.2f} |")
        if p["cpi_known"] < 1:
            print(f"| {name} | CPI model known for {100 * p['cpi_known']:.0f} % of the intervals |")
    print()
    for d in densities:
        for c in conditions:
            s = summary_of(aggregate(result, run, names, d, c, seeds))
            if s:
                print(f"{title}, {d} samples, {CONDITION_NAMES[c]}: mean CoV/SP {s['mean_ratio']:.2f}"
                      f" over {s['workloads']}, worst {s['worst']} {s['worst_ratio']:.2f}, "
                      f"within 1.5x {s['within_1_5']} of {s['workloads']}, one-interval phases "
                      f"{s['one_interval']:.0f} of {s['phases']:.0f} "
                      f"({100 * s['one_interval_share']:.0f} %)")


def tree_description() -> str:
    import phasewatch
    here = os.path.dirname(os.path.abspath(phasewatch.__file__))
    git = lambda *a: subprocess.run(["git", "-C", here, *a], capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return here
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--", ".") else ""
    return f"{head} on {git('rev-parse', '--abbrev-ref', 'HEAD')}{dirty} ({here})"


def int_list(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def common_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--workdir", default="/tmp/phasewatch-groundtruth",
                    help="valgrind outputs, cached labels and traces (default: %(default)s)")
    ap.add_argument("--detector", default="vpf-ip")
    ap.add_argument("--seeds", type=int, default=3,
                    help="IP traces per workload, density and condition, their figures "
                         "averaged (default 3: one seed moves a half's mean ratio by ~0.1)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--simpoint", metavar="PATH", help="SimPoint 3.2's binary for the reference")
    ap.add_argument("--no-check", action="store_true",
                    help="skip the check against `phasewatch replay`")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="workloads or programs (default: all)")
    common_arguments(ap)
    ap.add_argument("--no-valgrind", action="store_true",
                    help="use the valgrind outputs already in WORKDIR, run nothing new")
    ap.add_argument("--samples", type=int_list, default=list(DENSITIES),
                    help="IPs an interval, a list (default 10,30,100)")
    ap.add_argument("--half", choices=("tuning", "test", "unseen", "both", "all"), default="both")
    ap.add_argument("--conditions", default="pmu,ip-only", help="pmu, ip-only or both (default)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a DetectorParams field (repeatable)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    conditions = [c for c in args.conditions.split(",") if c]
    for c in conditions:
        if c not in CONDITIONS:
            ap.error(f"--conditions: {c}: give pmu or ip-only")
    overrides = parse_sets(args.sets)
    workloads = select(args.names, args.half)
    if not args.no_valgrind:
        for w in workloads:
            build(w, args.workdir, INTERVAL)
    workloads = select([w.name for w in workloads], "all", args.workdir, need_outputs=True)
    if not workloads:
        print("no workloads with valgrind outputs", file=sys.stderr)
        return 1
    headline = HEADLINE if HEADLINE in args.samples else args.samples[0]
    pool = Pool(args.jobs)
    t0 = time.time()
    try:
        result = evaluate(workloads, args.workdir, args.samples, conditions, args.seeds,
                          [{"detector": args.detector, "overrides": overrides}], pool,
                          args.simpoint, check_cli=not args.no_check)
    finally:
        pool.close()
    elapsed = time.time() - t0
    reference = next(iter(result["prepared"].values()))["reference"]
    print(f"tree: {tree_description()}")
    print(f"detector {args.detector}" + "".join(f", {k}={v}" for k, v in overrides.items())
          + f"; reference: {reference}; seeds {args.seeds}; samples {args.samples}")
    print(f"time: {elapsed:.0f} s ({result['timing']['replays']} replays; prepare "
          f"{result['timing']['prepare_s']:.0f} s, traces {result['timing']['traces_s']:.0f} s, "
          f"labelling {result['timing']['label_s']:.0f} s)")
    for which in HALF_ORDER:
        names = [w.name for w in workloads if half(w) == which]
        if names:
            print_half(result, 0, names, f"{which} half", args.samples, conditions, args.seeds, headline)
    if args.json:
        summaries = {}
        for which in HALF_ORDER:
            names = [w.name for w in workloads if half(w) == which]
            for d in args.samples:
                for c in conditions:
                    summaries[f"{which}|{d}|{c}"] = summary_of(
                        aggregate(result, 0, names, d, c, args.seeds))
        with open(args.json, "w") as f:
            json.dump({"tree": tree_description(), "detector": args.detector,
                       "overrides": overrides, "seeds": args.seeds, "samples": args.samples,
                       "halves": HALVES, "summaries": summaries, **result}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
