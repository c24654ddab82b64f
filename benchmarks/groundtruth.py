"""Ground truth from real programs, with SimPoint's method beside phasewatch.

    .venv/bin/python benchmarks/groundtruth.py [--workdir DIR] [--live] [NAME ...]

For each workload (groundtruth_workloads.py: bzip2, gzip and xz with two
threads on mixed input, cc1 -O2 on a generated C file, a perl script of two
halves, sqlite3 on a scripted workload, node running a script of three parts,
and closefns, two hot functions next to each other):

1. valgrind exp-bbv, 100M-instruction intervals: basic-block vectors and the
   block addresses; valgrind's --trace-symtab log gives each object's
   executable mapping.  callgrind with cache and branch simulation, dumped
   every 2M blocks, gives the CPI model (below).  (groundtruth_build.py;
   outputs kept in DIR and reused.)
2. SimPoint's method (phasewatch.simpoint.method on scikit-learn: 15-d random
   projection, k-means, BIC; no SimPoint binary is installed here) labels the
   intervals: the reference labelling.
3. phasewatch's bbv detector replays the .bb file online.
4. An instruction-exact IP trace: for each interval, 30 IPs drawn from its
   blocks in proportion to their instructions (one IP every 3.3M
   instructions: what a 1 kHz cpu-clock sampler, ``perf record -F 1000`` or
   phasewatch's own, gives on a 3.3 GHz core retiring one instruction a
   cycle), with cumulative instruction
   and cycle counts (cycles from the CPI model) so that replay cuts exactly
   the intervals SimPoint labelled.  The executable mappings go in the trace
   metadata ("mappings"); code valgrind saw in no object (a JIT's) gets an
   anonymous mapping per 256 KiB-aligned span, as generated code appears in
   /proc/PID/maps.  ``phasewatch replay --detector vpf-ip`` runs the
   detector of this tree over it.
5. Baselines: everything one phase; fixed chunks (as many consecutive equal
   chunks as SimPoint found phases).
6. With --live, the program also runs natively under
   ``phasewatch run --detector vpf-ip`` (time-based intervals on a host
   without a PMU: their count is not comparable, only the phases found).

CPI model (no PMU here): cycles = Ir + 10 * (I1 misses + D1 misses)
+ 100 * (last-level misses) + 15 * (mispredicted branches), from callgrind's
simulated caches (its defaults for this host) and branch predictor.
Homogeneity is the thesis's: mean per-phase CoV of that CPI, a phase of one
interval counting as the whole run's CoV (lower is better).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from groundtruth_build import argv, build, paths  # noqa: E402
from groundtruth_workloads import WORKLOADS, available  # noqa: E402

from phasewatch.core import detectors
from phasewatch.formats import metadata as md  # noqa: E402
from phasewatch.core.batch import SampleBatch  # noqa: E402
from phasewatch.simpoint.bbvdetect import BbvDetector  # noqa: E402
from phasewatch.formats.bbvfile import looks_like_bb, read_bb, read_pc, read_symtab_mappings  # noqa: E402
from phasewatch.cli.eval import cpi_cov_quality  # noqa: E402
from phasewatch.core.params import DetectorParams, IntervalParams  # noqa: E402
from phasewatch.simpoint.method import simpoint  # noqa: E402
from phasewatch.formats.trace import TraceWriter  # noqa: E402

INTERVAL = 100_000_000
SAMPLES_PER_INTERVAL = 30
#: A second vpf-ip row at this threshold (the default is the thesis's 0.25).
LOWER_THRESHOLD = 0.2
#: Generated code is given anonymous mappings of this alignment (see above).
JIT_SPAN = 256 << 10
PHASEWATCH = os.path.join(os.path.dirname(sys.executable), "phasewatch")
#: CPI model weights: cycles per event on top of one per instruction.
L1_MISS, LL_MISS, MISPREDICT = 10, 100, 15


#: Rates per instruction from callgrind's events that are not the CPI, for a
#: homogeneity figure beside it: name -> the events summed.
RATES = {"d1_miss": ("D1mr", "D1mw"), "mispredict": ("Bcm", "Bim"), "access": ("Dr", "Dw"),
         "branch": ("Bc", "Bi")}


def callgrind_cpi(cg_prefix: str, instructions: np.ndarray, thread: int | None = None) -> np.ndarray:
    """Per-interval CPI of the model (see :func:`callgrind_per_interval`)."""
    return callgrind_per_interval(cg_prefix, instructions, thread)["cpi"]


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
    # cumulative events as a function of cumulative instructions, scaled to exp-bbv's count
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


def write_ip_trace(path: str, counts, pcs: dict, cpi: np.ndarray, mappings: list[dict],
                   main_exe: str, seed: int = 0) -> None:
    """IPs drawn from each interval's blocks; counters cumulative, so each
    interval ends exactly at its last sample."""
    rng = np.random.default_rng(seed)
    n = counts.shape[0]
    cpi = np.where(np.isnan(cpi), np.nanmean(cpi) if (~np.isnan(cpi)).any() else 1.0, cpi)
    addr = np.zeros(counts.shape[1], np.uint64)
    for bid, (a, _) in pcs.items():
        if bid < len(addr):
            addr[bid] = a
    # a first sample at zero, from which the decoder takes its first deltas
    ips, instr, cyc = [addr[counts.getrow(0).indices[:1]]], [np.zeros(1)], [np.zeros(1)]
    done_i, done_c = 0, 0.0
    for i in range(n):
        row = counts.getrow(i)
        p = row.data / row.data.sum()
        ips.append(addr[rng.choice(row.indices, SAMPLES_PER_INTERVAL, p=p)])
        step = np.arange(1, SAMPLES_PER_INTERVAL + 1) * INTERVAL // SAMPLES_PER_INTERVAL
        instr.append(done_i + step)
        cyc.append(done_c + step * cpi[i])
        done_i += INTERVAL
        done_c += INTERVAL * cpi[i]
    ip = np.concatenate(ips)
    m = len(ip)
    instructions = np.concatenate(instr).astype(np.uint64)
    cycles = np.concatenate(cyc).astype(np.uint64)
    t_ns = (cycles.astype(np.float64) / 3.0).astype(np.int64)      # a nominal 3 GHz clock
    text = next(([m_["start"], m_["end"]] for m_ in mappings if m_["path"] == main_exe), None)
    signals = ("t_ns", "cpu", "tid", "ip", "instructions", "cycles")
    meta = md.new(base_freq_mhz=3000.0, signals={s: "valgrind" for s in signals},
                  interval=IntervalParams(instructions=INTERVAL), text_range=text,
                  mappings=mappings, counter_scope="thread",
                  source="valgrind exp-bbv blocks, IPs drawn by benchmarks/groundtruth.py")
    meta["histograms"]["text_range"] = text
    with TraceWriter(path, meta, signals) as w:
        w.write(SampleBatch({"t_ns": t_ns, "cpu": np.zeros(m, np.int32),
                             "tid": np.ones(m, np.int32), "ip": ip,
                             "instructions": instructions, "cycles": cycles}))


def jit_mappings(pcs: dict, mappings: list[dict]) -> list[dict]:
    """Anonymous mappings for the blocks outside every object valgrind listed."""
    starts = np.array([m["start"] for m in mappings], np.uint64)
    ends = np.array([m["end"] for m in mappings], np.uint64)
    addr = np.array([a for a, _ in pcs.values()], np.uint64)
    inside = ((addr[:, None] >= starts[None, :]) & (addr[:, None] < ends[None, :])).any(axis=1) \
        if len(starts) else np.zeros(len(addr), bool)
    spans = np.unique(addr[~inside] // np.uint64(JIT_SPAN))
    return [{"start": int(s) * JIT_SPAN, "end": (int(s) + 1) * JIT_SPAN, "offset": 0, "path": ""}
            for s in spans if int(s) > 0]


def replay_phases(trace: str, out: str, detector: str, *options: str) -> np.ndarray:
    subprocess.run([PHASEWATCH, "replay", trace, "--detector", detector, "--output", out,
                    *options], check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return np.array([json.loads(l)["phase"] for l in f], np.int64)


def live_phases(argv: list[str], out: str) -> tuple[int, int]:
    subprocess.run([PHASEWATCH, "run", "--detector", "vpf-ip", "--output", out, "--"] + argv,
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        phases = [json.loads(l)["phase"] for l in f]
    return len(set(phases)), len(phases)


def busiest_thread(bb_path: str):
    """exp-bbv writes thread 1 to the file named and thread N to FILE.N: the
    thread that ran the most intervals, and its number."""
    files = {1: bb_path}
    for f in glob.glob(bb_path + ".*"):
        if f.rsplit(".", 1)[1].isdigit():
            files[int(f.rsplit(".", 1)[1])] = f
    loaded = {t: read_bb(f) for t, f in files.items() if looks_like_bb(f)}
    thread = max(loaded, key=lambda t: len(loaded[t]))
    return loaded[thread], thread


def chunks(n: int, k: int) -> np.ndarray:
    return (np.arange(n) * k // n).astype(np.int64)


def score(truth: np.ndarray, labels: np.ndarray, per_interval: dict[str, np.ndarray]) -> dict:
    """Agreement with SimPoint's labels, and the thesis's homogeneity (mean
    per-phase CoV) of the CPI and of each of :data:`RATES`."""
    out = {"phases": int(len(np.unique(labels))),
           "ari": float(adjusted_rand_score(truth, labels)),
           "nmi": float(normalized_mutual_info_score(truth, labels)),
           "cpi_cov": cpi_cov_quality(labels, per_interval["cpi"])}
    out.update({f"{name}_cov": cpi_cov_quality(labels, per_interval[name]) for name in RATES})
    return out


def evaluate(w, workdir: str, live: bool, run_valgrind: bool = True,
             cpi_tolerance: float | None = None) -> dict:
    p = build(w, workdir, INTERVAL) if run_valgrind else paths(workdir, w)
    bb, thread = busiest_thread(p["bb"])
    # exp-bbv's last interval is the remainder: leave it out, as replay does
    counts = bb.counts[:-1] if bb.instructions[-1] < INTERVAL else bb.counts
    instr = np.asarray(counts.sum(axis=1)).ravel()
    n = counts.shape[0]
    per_interval = {name: v[:n] for name, v in callgrind_per_interval(
        p["cg"], np.asarray(bb.counts.sum(axis=1)).ravel(), thread if w.threads > 1 else None).items()}
    cpi = per_interval["cpi"]
    cpi_known = float(np.mean(~np.isnan(cpi)))
    sp = simpoint(counts)
    truth = sp.labels
    rows = {"SimPoint method (k-means + BIC)": score(truth, truth, per_interval)}
    bbv = BbvDetector(DetectorParams(detector="bbv"))
    rows["phasewatch bbv (.bb replay)"] = score(truth, bbv.feed(counts, instr)[0], per_interval)
    mappings = read_symtab_mappings(p["vglog"])
    pcs = read_pc(p["pc"])
    mappings += jit_mappings(pcs, mappings)
    program = argv(w, p)[0]
    exe = os.path.realpath(program if os.path.isabs(program)
                           else subprocess.run(["which", program], capture_output=True,
                                               text=True).stdout.strip())
    trace = os.path.join(p["dir"], "ips.arrow")
    write_ip_trace(trace, counts, pcs, cpi, mappings, exe)
    tolerance = [] if cpi_tolerance is None else ["--cpi-tolerance", str(cpi_tolerance)]
    vpf_ip = replay_phases(trace, os.path.join(p["dir"], "vpf-ip.jsonl"), "vpf-ip", *tolerance)
    rows["phasewatch vpf-ip (IP trace replay: code + exact CPI)"] = score(truth, vpf_ip[:n],
                                                                          per_interval)
    code_only = replay_phases(trace, os.path.join(p["dir"], "vpf-ip-code.jsonl"), "vpf-ip",
                              "--cpi-tolerance", "0")
    rows["phasewatch vpf-ip --cpi-tolerance 0 (code only)"] = score(truth, code_only[:n],
                                                                    per_interval)
    lower = replay_phases(trace, os.path.join(p["dir"], "vpf-ip-lower.jsonl"), "vpf-ip",
                          "--threshold", str(LOWER_THRESHOLD))
    rows[f"phasewatch vpf-ip --threshold {LOWER_THRESHOLD}"] = score(truth, lower[:n], per_interval)
    if "vpf-ip-fold" in detectors.NAMES:
        fold = replay_phases(trace, os.path.join(p["dir"], "vpf-ip-fold.jsonl"), "vpf-ip-fold")
        rows["phasewatch vpf-ip-fold (thesis's fold of .text)"] = score(truth, fold[:n],
                                                                        per_interval)
    rows["baseline: one phase"] = score(truth, np.zeros(n, np.int64), per_interval)
    rows[f"baseline: {sp.k} fixed chunks"] = score(truth, chunks(n, sp.k), per_interval)
    result = {"name": w.name, "what": w.what, "intervals": n, "rows": rows, "thread": thread,
              "cpi_known": cpi_known,
              "mappings": len(mappings), "vpf_ip_intervals": int(len(vpf_ip))}
    if live:
        result["live"] = live_phases(argv(w, p), os.path.join(p["dir"], "live.jsonl"))
    return result


def tree_description() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    git = lambda *a: subprocess.run(["git", "-C", here, *a], capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--", "../agent", ".") else ""
    return f"{git('rev-parse', '--short', 'HEAD')} on {git('rev-parse', '--abbrev-ref', 'HEAD')}{dirty}"


def print_table(results: list[dict]) -> None:
    print(f"tree: {tree_description()}")
    print(f"IP samples per interval: {SAMPLES_PER_INTERVAL}")
    print("| program | intervals | labelling | phases | ARI | NMI | CoV of CPI | CoV / SimPoint's "
          "| accesses/instr: CoV / SimPoint's | mispredicts/instr: CoV / SimPoint's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        simpoint = next(iter(r["rows"].values()))
        for label, s in r["rows"].items():
            name = r["name"] + (f" (thread {r['thread']})" if r.get("thread", 1) != 1 else "")
            print(f"| {name} | {r['intervals']} | {label} | {s['phases']} | "
                  f"{s['ari']:.3f} | {s['nmi']:.3f} | {s['cpi_cov']:.4f} | "
                  f"{s['cpi_cov'] / simpoint['cpi_cov']:.2f} | "
                  f"{s['access_cov'] / simpoint['access_cov']:.2f} | "
                  f"{s['mispredict_cov'] / simpoint['mispredict_cov']:.2f} |")
        if r["cpi_known"] < 1:
            print(f"| {r['name']} | | CPI model known for {100 * r['cpi_known']:.0f} % of the "
                  f"intervals (callgrind unfinished) | | | | | | | |")
        if "live" in r:
            print(f"| {r['name']} | {r['live'][1]} live | live `run --detector vpf-ip`, own intervals | "
                  f"{r['live'][0]} | - | - | - | - | - | - |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="workloads (default: all)")
    ap.add_argument("--workdir", default="/tmp/phasewatch-groundtruth")
    ap.add_argument("--live", action="store_true", help="also run each under phasewatch run")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ap.add_argument("--cpi-tolerance", type=float, metavar="X",
                    help="replay the first vpf-ip row with this CPI tolerance "
                         "(default: phasewatch's)")
    ap.add_argument("--no-valgrind", action="store_true",
                    help="use the valgrind outputs already in WORKDIR, run nothing new")
    args = ap.parse_args()
    results = []
    for w in WORKLOADS:
        if args.names and w.name not in args.names:
            continue
        why = available(w)
        if why:
            print(f"skipping {w.name}: {why}", file=sys.stderr)
            continue
        if args.no_valgrind and not os.path.exists(paths(args.workdir, w)["bb"]):
            print(f"skipping {w.name}: no valgrind output in {args.workdir}", file=sys.stderr)
            continue
        results.append(evaluate(w, args.workdir, args.live, not args.no_valgrind,
                                args.cpi_tolerance))
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tree": tree_description(), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
