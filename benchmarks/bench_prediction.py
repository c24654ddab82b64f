#!/usr/bin/env python3
"""Phase prediction on the held-out programs and the live test programs,
beside two baselines.

    .venv/bin/python benchmarks/bench_prediction.py --workdir DIR
        [--half tuning|test|unseen|all] [--samples 30] [--seeds 3]
        [--set NAME=VALUE ...] [--live] [--second-run] [--overhead] [--json FILE]

Held-out programs (groundtruth_workloads.py): the phase sequences are
phasewatch's own labels of the IP traces benchmarks/groundtruth.py draws from
valgrind exp-bbv runs (its IP-only condition: no CPI, as on this host), at
``--samples`` IPs an interval, ``--seeds`` traces each.  Only exp-bbv's output
is needed (``groundtruth_build.py DIR --bbv-only NAME ...`` makes it); labels
are cached in DIR/NAME/predict-labels-*.json.

Live programs (``--live``): ``phasewatch run --detector vpf-ip
--interval-samples 100`` on tests/workloads/abab (A, B, A), closefns and the
perl script of two halves (tools/real_workloads.py), and on the A/B
alternation of the live test (tests/workloads/alternate.c), each the
results file's phases.

Each sequence goes through phasewatch.core.predict.PhasePredictor and two
baselines, all scored by phasewatch.core.prediction.PredictionScore:

- last-value: the next interval's phase is this one's; no phase after a
  change; the run lasts as long as the phase's last run did;
- most frequent successor: the next interval's phase is the one that most
  often followed this phase's intervals (itself included); after a change,
  the phase that most often followed its runs; the run lasts the median of
  its past runs.

Figures: next-interval accuracy, accuracy at changes (the phase after the
change, as predicted on the last interval before it), changes whose next
interval was foreseen, and the median relative error of the remaining
length (|predicted - true| / (true + 1), intervals).  Per workload (summed
over seeds), and pooled per half.  Beside the accuracies, their bound for a
predictor of the sequence so far (``bounds``): every interval that stays
right, and every change into a step taken before in the sequence (in
brackets: into a phase seen before, which no predictor of history can
exceed).

``--second-run``: each held-out trace as a program's second run, as the
phase catalogue gives it: the classifier started from a first run's phases
(Pipeline.known_phases) and the prediction tap from what that run's
predictor learnt of them (PredictionTap.memory); the first run is the
program's other input at the same seed, or the same input's next seed.
Beside last-value and the most frequent successor given the first run's
phases first, and the predictor without memory on the same phases.

``--overhead``: replay's time per interval with and without the prediction
tap, on the same traces (the test half's and the unseen set's, every seed),
side by side: each trace opened, replayed through the driver into a results
file, the median CPU time of ``--repeat`` runs, the two kinds interleaved.

``--set NAME=VALUE`` overrides a constant of phasewatch.core.predict
(ORDER, KEPT, SUPPORT, CHANGE_SHARE, PRIOR): tune on the tuning half only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools"))

from groundtruth import (HEADLINE, label_trace, prepare, trace_path,  # noqa: E402
                         write_trace)
from groundtruth_build import paths  # noqa: E402
from groundtruth_workloads import WORKLOADS, available, half  # noqa: E402

from phasewatch.core import predict  # noqa: E402
from phasewatch.core.predict import NONE, PhasePredictor, Prediction, Predictions  # noqa: E402
from phasewatch.core.prediction import PredictionScore  # noqa: E402

CONDITION = "ip-only"
INTERVAL = 100_000_000
PHASEWATCH = ROOT / ".venv" / "bin" / "phasewatch"
LIVE_OPTIONS = ("--detector", "vpf-ip", "--interval-samples", "100", "--no-catalog")


# ------------------------------------------------------------ baselines

class LastValue:
    def __init__(self):
        self.phase, self.length, self.last_run = NONE, 0, {}

    def observe(self, phase: int) -> Prediction:
        if phase != self.phase:
            if self.phase != NONE:
                self.last_run[self.phase] = self.length
            self.phase, self.length = phase, 0
        self.length += 1
        last = self.last_run.get(phase)
        remaining = self.length if last is None else max(last - self.length, 0)
        return Prediction(phase, NONE, remaining, 1.0, 0.0, 0.0)


class MostFrequentSuccessor:
    def __init__(self):
        self.phase, self.length = NONE, 0
        self.next_counts: dict[int, Counter] = defaultdict(Counter)
        self.run_successors: dict[int, Counter] = defaultdict(Counter)
        self.runs: dict[int, list[int]] = defaultdict(list)

    def observe(self, phase: int) -> Prediction:
        if self.phase != NONE:
            self.next_counts[self.phase][phase] += 1
        if phase != self.phase:
            if self.phase != NONE:
                self.run_successors[self.phase][phase] += 1
                self.runs[self.phase].append(self.length)
            self.phase, self.length = phase, 0
        self.length += 1
        nxt = self.next_counts[phase].most_common(1)
        after = self.run_successors[phase].most_common(1)
        runs = self.runs[phase]
        remaining = (max(int(statistics.median_low(runs)) - self.length, 0) if runs
                     else self.length)
        return Prediction(nxt[0][0] if nxt else phase, after[0][0] if after else NONE,
                          remaining, 0.0, 0.0, 0.0)


PREDICTORS = {"phasewatch": PhasePredictor, "last-value": LastValue,
              "most frequent successor": MostFrequentSuccessor}


def scored(phases, make) -> PredictionScore:
    predictor, score = make(), PredictionScore()
    if phases:
        score.add(np.array(phases), Predictions.of([predictor.observe(p) for p in phases], 1.0))
    return score


def merge(scores: list[PredictionScore]) -> dict:
    total = PredictionScore()
    for s in scores:
        for name in ("next_right", "next_wrong", "change_right", "change_wrong", "foreseen"):
            setattr(total, name, getattr(total, name) + getattr(s, name))
        total.errors += s.errors
    return total.summary()


# ------------------------------------------------------------ sequences

def held_out_sequences(workdir: str, which: str, samples: int, seeds: int,
                       detector: str, simpoint: bool = False) -> dict[str, list[list[int]]]:
    out = {}
    for w in WORKLOADS:
        if which not in ("all", half(w)) or available(w):
            continue
        p = paths(workdir, w)
        if not os.path.exists(p["bb"]):
            print(f"skipping {w.name}: no exp-bbv output in {workdir}", file=sys.stderr)
            continue
        if simpoint:
            out[w.name] = [[int(x) for x in prepare(w, workdir)["truth"]]]
        else:
            out[w.name] = [labels_of(w, workdir, samples, seed, detector)
                           for seed in range(seeds)]
    return out


def repeats(seqs: list[list[int]]) -> tuple[int, int]:
    """Changes to a phase that followed the same phase before (what a
    predictor of history can know), and intervals in a run of a phase that
    had a finished run before."""
    changes = intervals = 0
    for seq in seqs:
        pairs, finished = set(), set()
        start = 0
        for i in range(1, len(seq) + 1):
            if i < len(seq) and seq[i] == seq[i - 1]:
                continue
            if seq[start] in finished:
                intervals += i - start
            if i < len(seq):
                changes += (seq[i - 1], seq[i]) in pairs
                pairs.add((seq[i - 1], seq[i]))
                finished.add(seq[start])
            start = i
    return changes, intervals


def bounds(seqs: list[list[int]]) -> dict:
    """What any predictor that knows only the sequence so far can score,
    counted as the scores count (a scored interval has a phase and so has
    the one before it): the intervals scored, those that stay in the phase
    (last-value is right on them), and the changes, of which those into a
    step taken before in the sequence (a phase that followed the same phase
    earlier: a table of past steps can name it) and those into a phase seen
    before (a phase never seen has an id no predictor can name)."""
    out = dict.fromkeys(("scored", "stays", "changes", "step_seen", "phase_seen"), 0)
    for seq in seqs:
        steps, seen = set(), set(seq[:1])
        for before, phase in zip(seq, seq[1:]):
            if phase >= 0 and before >= 0:
                out["scored"] += 1
                if phase == before:
                    out["stays"] += 1
                else:
                    out["changes"] += 1
                    out["step_seen"] += (before, phase) in steps
                    out["phase_seen"] += phase in seen
            if phase != before:
                steps.add((before, phase))
            seen.add(phase)
    return out


def bound_texts(b: dict) -> tuple[str, str]:
    """The bounds of the next-interval accuracy and of the accuracy at
    changes: a step seen before (a phase seen before)."""
    def share(right, of):
        return pct(right / of if of else None)
    return (f"{share(b['stays'] + b['step_seen'], b['scored'])} "
            f"({share(b['stays'] + b['phase_seen'], b['scored'])})",
            f"{share(b['step_seen'], b['changes'])} ({share(b['phase_seen'], b['changes'])})")


def labels_of(w, workdir: str, samples: int, seed: int, detector: str) -> list[int]:
    trace = trace_path(workdir, w.name, samples, CONDITION, seed)
    cache = Path(trace).with_suffix(f".{detector}.predict-labels.json")
    if cache.exists():
        return json.loads(cache.read_text())
    prep = prepare(w, workdir)
    if not os.path.exists(trace):
        write_trace(prep, samples, CONDITION, seed, trace)
    labels = label_trace(trace, detector, {})[:prep["intervals"]].tolist()
    cache.write_text(json.dumps(labels))
    return labels


def live_sequences(folder: Path) -> dict[str, list[list[int]]]:
    import real_workloads
    subprocess.run(["make", "-s", "-C", str(ROOT / "tests" / "workloads"), f"OUT={folder}",
                    "CC=gcc"], check=True)
    real_workloads.perl_script(folder / "phases.pl")
    programs = {"abab (A, B, A; 2 s each)": [str(folder / "abab"), "2"],
                "closefns": [str(folder / "closefns")],
                "perl halves": ["perl", "phases.pl"],
                "alternate (A 2 s, B 1 s, six cycles)": [str(folder / "alternate"), "2", "1", "6"]}
    out = {}
    for name, argv in programs.items():
        results = folder / "out.jsonl"
        subprocess.run([str(PHASEWATCH), "run", "-q", *LIVE_OPTIONS, "--output", str(results),
                        "--", *argv], check=True, cwd=folder, stdout=subprocess.DEVNULL)
        phases = [json.loads(line)["phase"] for line in results.read_text().splitlines()]
        out[name] = [phases]
    return out


# ------------------------------------------------------------ second runs

#: The second-run protocols: where the first run's memory comes from.
SECOND_RUNS = {
    "other input": "the program's other input, the same seed",
    "another seed": "the same input, the next seed (another draw of the samples)",
}


def catalogued_run(trace: str, detector: str, start: dict | None = None,
                   memory: dict | None = None) -> tuple[list[int], PredictionScore, dict, dict | None]:
    """One run as ``phasewatch run`` with the phase catalogue gives it: the
    classifier started from ``start`` (an earlier run's phases, as
    Pipeline.known_phases gives them and the catalogue keeps them), the
    predictor from ``memory`` (what the earlier run's predictor learnt of
    them, PredictionTap.memory, as the catalogue keeps it).  The run's
    phases, its predictions' scores, and what it leaves for the next run."""
    from phasewatch.core.driver import Driver
    from phasewatch.core.params import interval_params_of
    from phasewatch.core.pipeline import Pipeline
    from phasewatch.core.prediction import PredictionTap
    from phasewatch.core.settings import DetectionSettings
    from phasewatch.formats.results import PhaseSummary
    from phasewatch.formats.tracefiles import open_trace
    source = open_trace(trace, warn=lambda m: None)
    try:
        meta = source.metadata
        settings = DetectionSettings.given({"detector": detector}, meta.get("detection"))
        fitted = settings.for_stream(tuple(meta.get("signals") or source.signals), lambda m: None,
                                     default_interval=interval_params_of(meta))
        pipeline = Pipeline.for_trace(meta, fitted.params(meta))
        pipeline.start_from(start)
        tap = PredictionTap.for_pipeline(pipeline, memory)
        summary = PhaseSummary(keep_phases=True)
        driver = Driver(pipeline, [tap, summary])
        driver.run(source.batches())
        driver.finish()
        driver.close()
    finally:
        source.close()
    known = pipeline.known_phases()
    kept = tap.memory("", [p["id"] for p in known["phases"]])
    return summary.phase_labels().tolist(), tap.scores.get("", PredictionScore()), known, kept


def first_run_of(w, seed: int, seeds: int, protocol: str, present: dict):
    """The (workload, seed) whose run's memory the second run of ``w`` at
    ``seed`` starts from; None where there is none."""
    if protocol == "another seed":
        return (w, (seed + 1) % seeds) if seeds > 1 else None
    others = [v for v in present.values() if v.program == w.program and v.name != w.name]
    return (others[0], seed) if others else None


def warm_baseline(first: list[int], second: list[int], make) -> PredictionScore:
    """A baseline that saw the first run, scored on the second (its run
    state, not its memory, started afresh)."""
    predictor = make()
    for p in first:
        predictor.observe(p)
    predictor.phase, predictor.length = NONE, 0
    score = PredictionScore()
    if second:
        score.add(np.array(second), Predictions.of([predictor.observe(p) for p in second], 1.0))
    return score


def second_runs(workdir: str, which: str, samples: int, seeds: int, detector: str) -> dict:
    """Each held-out trace as a second run, its classifier and predictor
    started from a first run's phases and memory (SECOND_RUNS), beside the
    two baselines that saw the first run, and beside the same phases
    predicted without memory."""
    present = {w.name: w for w in WORKLOADS if which in ("all", half(w)) and not available(w)
               and os.path.exists(paths(workdir, w)["bb"])}
    out = {}
    for protocol, what in SECOND_RUNS.items():
        print(f"\n#### {which} half, second run: memory from a first run on {what}\n")
        print("| program | first run | intervals | changes | next: pw | LV | MFS | no memory "
              "| at changes: pw | MFS | no memory | foreseen | remaining error: pw | LV | MFS "
              "| no memory |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        pooled: dict[str, list] = {"pw": [], "lv": [], "mfs": [], "cold": []}
        rows = {}
        for w in present.values():
            per: dict[str, list] = {k: [] for k in pooled}
            intervals, firsts = 0, set()
            for seed in range(seeds):
                first = first_run_of(w, seed, seeds, protocol, present)
                if first is None:
                    continue
                labels_of(first[0], workdir, samples, first[1], detector)      # the traces made
                labels_of(w, workdir, samples, seed, detector)
                firsts.add(first[0].name)
                one, _, known, memory = catalogued_run(
                    trace_path(workdir, first[0].name, samples, CONDITION, first[1]), detector)
                two, score, _, _ = catalogued_run(
                    trace_path(workdir, w.name, samples, CONDITION, seed), detector, known, memory)
                per["pw"].append(score)
                per["lv"].append(warm_baseline(one, two, LastValue))
                per["mfs"].append(warm_baseline(one, two, MostFrequentSuccessor))
                per["cold"].append(scored(two, PhasePredictor))
                intervals += len(two)
            if not per["pw"]:
                continue
            for k in pooled:
                pooled[k] += per[k]
            got = {k: merge(v) for k, v in per.items()}
            rows[w.name] = got | {"intervals": intervals, "first": sorted(firsts)}
            print(second_row(w.name, ", ".join(sorted(firsts)), intervals, got))
        if rows:
            total = {k: merge(v) for k, v in pooled.items()}
            n = sum(r["intervals"] for r in rows.values())
            print(second_row("**pooled**", "", n, total, bold=True))
            out[protocol] = {"programs": rows, "pooled": total}
    return out


def second_row(program: str, first: str, intervals: int, got: dict, bold: bool = False) -> str:
    pw, lv, mfs, cold = got["pw"], got["lv"], got["mfs"], got["cold"]
    b = "**" if bold else ""
    return (f"| {program} | {first} | {intervals} | {pw['changes']} | "
            f"{b}{pct(pw['next_accuracy'])}{b} | {pct(lv['next_accuracy'])} | "
            f"{pct(mfs['next_accuracy'])} | {pct(cold['next_accuracy'])} | "
            f"{b}{pct(pw['change_accuracy'])}{b} | {pct(mfs['change_accuracy'])} | "
            f"{pct(cold['change_accuracy'])} | {pw['changes_foreseen']} | "
            f"{b}{pct(pw['median_remaining_error'])}{b} | {pct(lv['median_remaining_error'])} | "
            f"{pct(mfs['median_remaining_error'])} | {pct(cold['median_remaining_error'])} |")


# ------------------------------------------------------------ tables

def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def table(title: str, sequences: dict[str, list[list[int]]]) -> dict:
    print(f"\n### {title}\n")
    print("| program | intervals | changes | seen before | next: pw | LV | MFS | bound "
          "| at changes: pw | MFS | bound | foreseen | in repeated runs "
          "| remaining error: pw | LV | MFS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    pooled: dict[str, list] = {name: [] for name in PREDICTORS}
    rows = {}
    for program, seqs in sequences.items():
        per = {}
        for name, make in PREDICTORS.items():
            scores = [scored(s, make) for s in seqs]
            pooled[name] += scores
            per[name] = merge(scores)
        pw, lv, mfs = per["phasewatch"], per["last-value"], per["most frequent successor"]
        intervals = sum(len(s) for s in seqs)
        seen, repeated = repeats(seqs)
        bound = bounds(seqs)
        next_bound, change_bound = bound_texts(bound)
        print(f"| {program} | {intervals} | {pw['changes']} | {seen} | "
              f"{pct(pw['next_accuracy'])} | {pct(lv['next_accuracy'])} | "
              f"{pct(mfs['next_accuracy'])} | {next_bound} | {pct(pw['change_accuracy'])} | "
              f"{pct(mfs['change_accuracy'])} | {change_bound} | {pw['changes_foreseen']} | "
              f"{pct(repeated / intervals)} | {pct(pw['median_remaining_error'])} | "
              f"{pct(lv['median_remaining_error'])} | {pct(mfs['median_remaining_error'])} |")
        rows[program] = per | {"intervals": intervals, "changes_seen_before": seen,
                               "intervals_in_repeated_runs": repeated, "bounds": bound}
    total = {name: merge(scores) for name, scores in pooled.items()}
    pw, lv, mfs = total["phasewatch"], total["last-value"], total["most frequent successor"]
    n = sum(r['intervals'] for r in rows.values())
    seen = sum(r["changes_seen_before"] for r in rows.values())
    repeated = sum(r["intervals_in_repeated_runs"] for r in rows.values())
    bound = {k: sum(r["bounds"][k] for r in rows.values()) for k in bounds([])}
    total["bounds"] = bound
    next_bound, change_bound = bound_texts(bound)
    print(f"| **pooled** | {n} | {pw['changes']} | {seen} | "
          f"**{pct(pw['next_accuracy'])}** | {pct(lv['next_accuracy'])} | "
          f"{pct(mfs['next_accuracy'])} | {next_bound} | **{pct(pw['change_accuracy'])}** | "
          f"{pct(mfs['change_accuracy'])} | {change_bound} | {pw['changes_foreseen']} | "
          f"{pct(repeated / n if n else None)} | "
          f"**{pct(pw['median_remaining_error'])}** | {pct(lv['median_remaining_error'])} | "
          f"{pct(mfs['median_remaining_error'])} |")
    return {"programs": rows, "pooled": total}


# ------------------------------------------------------------ overhead

#: The long trace of the overhead figure: the synthetic schedule repeated.
LONG_SAMPLES = 2_000_000


def overhead(workdir: str, samples: int, detector: str, names: list[str], repeat: int,
             long: bool = False) -> dict:
    """Replay's seconds per interval with and without the tap, the same
    traces, each the median of ``repeat`` runs (the driver and the results
    sink as ``phasewatch replay --output`` runs them)."""
    from phasewatch.core.driver import Driver
    from phasewatch.core.pipeline import Pipeline
    from phasewatch.core.prediction import PredictionTap
    from phasewatch.core.settings import DetectionSettings
    from phasewatch.core.params import interval_params_of
    from phasewatch.formats.results import ResultsSink
    from phasewatch.formats.tracefiles import open_trace

    if long:
        from bench_whole import make_trace
        traces = [os.path.join(workdir, f"synthetic-{LONG_SAMPLES}.arrow")]
        make_trace(traces[0], LONG_SAMPLES, INTERVAL)
    else:
        traces = [trace_path(workdir, w.name, samples, CONDITION, seed) for w in WORKLOADS
                  if w.name in names and os.path.exists(paths(workdir, w)["bb"])
                  for seed in range(3)]
        traces = [t for t in traces if os.path.exists(t)]

    def once(path: str, tap: bool) -> tuple[float, int]:
        t0 = time.process_time()        # CPU time: the host is shared
        source = open_trace(path, warn=lambda m: None)
        meta = source.metadata
        settings = DetectionSettings.given({"detector": detector}, meta.get("detection"))
        fitted = settings.for_stream(tuple(meta.get("signals") or source.signals), lambda m: None,
                                     default_interval=interval_params_of(meta))
        pipeline = Pipeline.for_trace(meta, fitted.params(meta))
        with tempfile.TemporaryFile("w+b") as out:
            sinks = ([PredictionTap()] if tap else []) + [ResultsSink(out)]
            driver = Driver(pipeline, sinks)
            driver.run(source.batches())
            driver.flush()
            driver.close()
        source.close()
        return time.process_time() - t0, pipeline.count

    for path in traces:
        once(path, True)        # the kernels compiled and loaded, the file cached
    out = {}
    timed = {(path, tap): [] for path in traces for tap in (False, True)}
    for _ in range(repeat):         # interleaved: load on the host hits both alike
        for key in timed:
            timed[key].append(once(*key))
    for label, tap in (("without", False), ("with", True)):
        per_trace = [(statistics.median(r[0] for r in timed[(path, tap)]), timed[(path, tap)][0][1])
                     for path in traces]
        seconds = sum(s for s, _ in per_trace)
        intervals = sum(n for _, n in per_trace)
        out[label] = {"seconds": seconds, "intervals": intervals,
                      "us_per_interval": 1e6 * seconds / intervals if intervals else None}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/phasewatch-groundtruth")
    ap.add_argument("--half", choices=("tuning", "test", "unseen", "all", "none"), default="all")
    ap.add_argument("--samples", type=int, default=HEADLINE)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--detector", default="vpf-ip")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--simpoint", action="store_true",
                    help="also SimPoint's reference labels of each program as a phase sequence")
    ap.add_argument("--live", action="store_true", help="also the live test programs")
    ap.add_argument("--second-run", action="store_true",
                    help="also each trace as a second run, started from a first run's phases "
                         "and predictor memory as the phase catalogue keeps them")
    ap.add_argument("--overhead", action="store_true", help="also replay's time with the tap")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    for s in args.sets:
        name, _, value = s.partition("=")
        if not hasattr(predict, name):
            ap.error(f"--set {s}: no constant {name} in phasewatch.core.predict")
        setattr(predict, name, type(getattr(predict, name))(float(value)))
    print(f"samples {args.samples} an interval, {args.seeds} seeds, detector {args.detector}, "
          f"condition {CONDITION}" + "".join(f", {s}" for s in args.sets))
    result = {}
    halves = ("test", "unseen", "tuning") if args.half == "all" else \
        (() if args.half == "none" else (args.half,))
    for which in halves:
        seqs = held_out_sequences(args.workdir, which, args.samples, args.seeds, args.detector)
        if seqs:
            note = " (the predictor's constants were chosen on it)" if which == "tuning" else ""
            result[which] = table(f"{which} half{note}", seqs)
    if args.second_run:
        for which in halves:
            second = second_runs(args.workdir, which, args.samples, args.seeds, args.detector)
            if second:
                result[f"second run {which}"] = second
    if args.simpoint:
        for which in halves:
            seqs = held_out_sequences(args.workdir, which, args.samples, 1, args.detector, True)
            if seqs:
                result[f"simpoint {which}"] = table(
                    f"{which} half, SimPoint's reference labels (offline k-means of the "
                    f"basic-block vectors) as the phase sequence", seqs)
    if args.live:
        with tempfile.TemporaryDirectory() as d:
            result["live"] = table("live test programs (one run each, 100 samples an interval)",
                                   live_sequences(Path(d)))
    if args.overhead:
        names = [w.name for w in WORKLOADS if half(w) in ("test", "unseen")]
        for long, what in ((False, "the test half's and unseen set's traces (one block each)"),
                           (True, f"a synthetic trace of {LONG_SAMPLES:,} samples")):
            o = overhead(args.workdir, args.samples, args.detector, names, args.repeat, long)
            result["overhead long" if long else "overhead"] = o
            w, wo = o["with"]["us_per_interval"], o["without"]["us_per_interval"]
            print(f"\nreplay (trace read, driver, results file) of {what}: "
                  f"{wo:.1f} µs an interval without the prediction tap, {w:.1f} µs with it "
                  f"(+{100 * (w / wo - 1):.1f} %), {o['with']['intervals']} intervals, "
                  f"CPU time, median of {args.repeat}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
