#!/usr/bin/env python3
"""Whole-command figures, side by side in one run: what a user meets.

Each figure is a fresh process timed from outside (wall clock, and CPU time,
user + sys, from wait4), the median of --repeat runs:

* ``phasewatch replay T --output R.jsonl`` of a synthetic one-CPU trace
  (--samples samples, intervals of --interval instructions) on one core,
  against the numpy reference of the same algorithm run the same way
  (benchmarks/reference_replay.py); the same replay without --output, and
  with the kernels just in time (PHASEWATCH_KERNELS=jit) instead of the
  ahead-of-time module; and the pipeline alone in this process, after
  start-up, for comparison;
* scaling over cores: 2 × (usable CPUs) copies of the trace replayed as one
  ``phasewatch replay`` with --jobs 1, then with one job per usable CPU; and
  a trace of 2 × (usable CPUs) CPUs, --samples in all, replayed --per-cpu
  the same two ways;
* start-up: ``phasewatch replay`` of a 200-interval trace, how long after
  ``phasewatch run`` starts its command execs, and ``phasewatch run -- /bin/true``;
* ``phasewatch run`` of a fixed amount of work (a Python loop pinned to one
  CPU) against the same command alone: the command's own wall and CPU time
  (sampling interrupts are charged to it), and the agent's CPU time per second
  of the command.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from phasewatch.core import kernels
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import synthetic
from phasewatch.formats.trace import TraceReader, TraceWriter

HERE = Path(__file__).resolve().parent
#: The kernels just in time, as without the ahead-of-time module.
JIT = {**os.environ, "PHASEWATCH_KERNELS": "jit"}
BIN = str(Path(sys.executable).parent / "phasewatch")
WORK = ("import time\n"
        "w, c = time.perf_counter(), time.process_time()\n"
        "x = 0\n"
        "for i in range({n}): x += i * i\n"
        "print('work', time.perf_counter() - w, time.process_time() - c)\n")


def make_trace(path: str, samples: int, interval: int) -> None:
    if os.path.exists(path):
        return
    schedule = synthetic.repeat_schedule(samples, interval)
    batches = synthetic.generate(schedule, interval, seed=7)
    first = next(batches)
    with TraceWriter(path + ".tmp", synthetic.metadata(interval), first.signals) as w:
        w.write(first)
        for b in batches:
            w.write(b)
    os.replace(path + ".tmp", path)


def make_multi_cpu_trace(path: str, samples: int, interval: int, cpus: int) -> None:
    if os.path.exists(path):
        return
    import numpy as np

    from phasewatch.core.batch import SampleBatch, concat
    streams = []
    for cpu in range(cpus):
        schedule = synthetic.repeat_schedule(samples // cpus, interval)
        one = concat(list(synthetic.generate(schedule, interval, seed=20 + cpu, tid=1000 + cpu)))
        streams.append(SampleBatch({**one.columns, "cpu": np.full(len(one), cpu, np.int32)}))
    both = concat(streams)
    order = np.argsort(both["t_ns"], kind="stable")
    with TraceWriter(path + ".tmp", synthetic.metadata(interval), both.signals) as w:
        for a in range(0, len(order), 65536):
            rows = order[a:a + 65536]
            w.write(SampleBatch({n: c[rows] for n, c in both.columns.items()}))
    os.replace(path + ".tmp", path)


def timed(argv: list[str], cpus: set[int] | None = None, env=None) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and the children it waited for, stdout)."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env,
                                 preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"bench_whole: {' '.join(argv)} failed")
        out.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, out.read()


def median_of(repeat: int, argv: list[str], cpus=None, env=None) -> tuple[float, float]:
    runs = [timed(argv, cpus, env)[:2] for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def pipeline_only(path: str, cpu: int) -> tuple[float, int]:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        reader = TraceReader(path)
        meta = reader.metadata
        pipe = Pipeline.for_trace(meta, Params(interval=interval_params_of(meta),
                                               histograms=histogram_params_of(meta),
                                               detector=DetectorParams()))
        reader.read_only(pipe.columns)
        t0 = time.perf_counter()
        for batch in reader.batches():
            pipe.feed(batch)
        return time.perf_counter() - t0, pipe.samples
    finally:
        os.sched_setaffinity(0, before)


def exec_delay(cpus) -> float:
    """Seconds from starting ``phasewatch run`` to its command's first instruction."""
    t0 = time.time()
    _, _, out = timed([BIN, "run", "--", "/bin/date", "+%s.%N"], cpus)
    return float(re.search(r"^(\d+\.\d+)$", out, re.M).group(1)) - t0


def work_figures(argv: list[str], cpus) -> tuple[float, float, float, float]:
    """(wall, CPU of everything waited for, the work's own wall, its own CPU)."""
    wall, cpu, out = timed(argv, cpus)
    _, work_wall, work_cpu = re.search(r"^work (\S+) (\S+)$", out, re.M).group(0).split()
    return wall, cpu, float(work_wall), float(work_cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=6_000_000)
    ap.add_argument("--interval", type=int, default=76_000_000,
                    help="instructions per interval; the default gives about 200k intervals")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--reference-repeat", type=int, default=3)
    ap.add_argument("--work", type=int, default=30_000_000, help="loop iterations of the run workload")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "phasewatch-bench"))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    trace = os.path.join(args.workdir, f"whole-{args.samples}-{args.interval}.arrow")
    small = os.path.join(args.workdir, "whole-small.arrow")
    make_trace(trace, args.samples, args.interval)
    make_trace(small, 7_000, 100_000_000)
    usable = sorted(os.sched_getaffinity(0))
    one = {usable[-1]}
    out = os.path.join(args.workdir, "r.jsonl")
    timed([BIN, "replay", small], one)                       # fill the numba cache

    replay = median_of(args.repeat, [BIN, "replay", trace, "--output", out], one)
    no_out = median_of(args.repeat, [BIN, "replay", trace], one)
    timed([BIN, "replay", small], one, JIT)                  # fill numba's own cache
    jit = median_of(args.repeat, [BIN, "replay", trace, "--output", out], one, JIT)
    ref = median_of(args.reference_repeat,
                    [sys.executable, str(HERE / "reference_replay.py"), trace,
                     "--output", out + ".ref"], one)
    pipe = [pipeline_only(trace, usable[-1]) for _ in range(args.repeat)]
    pipe_s, samples = statistics.median(p[0] for p in pipe), pipe[0][1]
    intervals = sum(1 for _ in open(out))

    copies = 2 * len(usable)
    folder = os.path.join(args.workdir, "copies")
    os.makedirs(folder, exist_ok=True)
    for k in range(copies):
        link = os.path.join(folder, f"copy{k}.arrow")
        if not os.path.exists(link):
            os.symlink(trace, link)
    scale = {jobs: median_of(args.repeat, [BIN, "replay", folder, "--jobs", str(jobs),
                                           "--output", os.path.join(args.workdir, "copies-out")])
             for jobs in sorted({1, len(usable)})}
    multi = os.path.join(args.workdir, f"multi-{copies}cpu-{args.samples}-{args.interval}.arrow")
    make_multi_cpu_trace(multi, args.samples, args.interval, copies)
    per_cpu = {jobs: median_of(args.repeat, [BIN, "replay", multi, "--per-cpu", "--jobs", str(jobs),
                                             "--output", os.path.join(args.workdir, "multi-out")])
               for jobs in sorted({1, len(usable)})}
    multi_samples = sum(len(b) for b in TraceReader(multi).batches())

    start = median_of(args.repeat, [BIN, "replay", small, "--json"], one)
    delay = statistics.median(exec_delay(None) for _ in range(args.repeat))
    true = median_of(args.repeat, [BIN, "run", "--", "/bin/true"])

    script = os.path.join(args.workdir, "work.py")
    Path(script).write_text(WORK.format(n=args.work))
    cmd = ["/usr/bin/python3", script]
    alone = [work_figures(cmd, one) for _ in range(args.repeat)]
    watched = [work_figures([BIN, "run", "--cpu", str(usable[-1]), "--"] + cmd, None)
               for _ in range(args.repeat)]
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    agent_pct = statistics.median(100 * (w[1] - w[3]) / w[2] for w in watched)

    print(f"machine: {len(usable)} usable CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
          f"median of {args.repeat} (reference: {args.reference_repeat})")
    print(f"trace: {samples:,} samples of one CPU, {intervals:,} intervals; "
          f"kernels: {kernels.status()}")
    rows = [
        ("replay --output, whole process, one core", replay, samples / replay[0] / 1e6),
        ("replay without --output, whole process, one core", no_out, samples / no_out[0] / 1e6),
        ("replay --output, kernels just in time (numba's cache)", jit, samples / jit[0] / 1e6),
        ("numpy reference with output, whole process, one core", ref, samples / ref[0] / 1e6),
        ("pipeline alone, in process, after start-up, one core", (pipe_s, None),
         samples / pipe_s / 1e6),
    ]
    for name, (wall, cpu), rate in rows:
        cpu_text = f"{cpu:7.2f} s CPU" if cpu is not None else " " * 13
        print(f"  {name:<58} {wall:7.2f} s wall {cpu_text} {rate:7.1f} M samples/s")
    print(f"  replay --output vs numpy reference: {ref[0] / replay[0]:.1f}x faster (wall), "
          f"{ref[1] / replay[1]:.1f}x (CPU)")
    base = scale[1][0]
    for jobs, (wall, cpu) in scale.items():
        print(f"  {copies} traces, --jobs {jobs}: {wall:6.2f} s wall {cpu:6.2f} s CPU "
              f"{copies * samples / wall / 1e6:6.1f} M samples/s, speed-up {base / wall:.2f}x")
    base = per_cpu[1][0]
    for jobs, (wall, cpu) in per_cpu.items():
        print(f"  one trace of {copies} CPUs --per-cpu, --jobs {jobs}: {wall:6.2f} s wall {cpu:6.2f} s CPU "
              f"{multi_samples / wall / 1e6:6.1f} M samples/s, speed-up {base / wall:.2f}x")
    print(f"  start-up: replay of a 200-interval trace {start[0]:.2f} s wall {start[1]:.2f} s CPU")
    print(f"  start-up: phasewatch run's command execs after {delay:.3f} s")
    print(f"  phasewatch run -- /bin/true: {true[0]:.2f} s wall {true[1]:.2f} s CPU")
    print(f"  run of {args.work:,} loop iterations: alone {med(alone, 2):.2f} s wall "
          f"{med(alone, 3):.2f} s CPU; watched {med(watched, 2):.2f} s wall "
          f"{med(watched, 3):.2f} s CPU (slowdown {100 * (med(watched, 2) / med(alone, 2) - 1):+.1f} % "
          f"wall, {100 * (med(watched, 3) / med(alone, 3) - 1):+.1f} % CPU)")
    print(f"  agent CPU per second of the command, start-up and end included: {agent_pct:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
