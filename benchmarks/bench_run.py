#!/usr/bin/env python3
"""Overhead of ``phasewatch run``: the agent's own CPU time per second of CMD's run.

Runs ``phasewatch run [OPTIONS] -- abab SECONDS`` (region A, B, A, each
SECONDS of CPU) --repeat times, and watches the agent process from outside
every --poll-ms:

* the agent's CPU time, user + sys, summed over all its threads, from
  ``/proc/AGENT/task/*/schedstat`` (nanoseconds; CMD's time is not in it);
* whether CMD is running: a child of the agent whose executable is abab.

The agent's time is split into start-up (interpreter, imports, loading the
kernels, opening the sources: before CMD runs and in its first --settle
seconds, while the loading threads finish), watching (the live loop while
CMD runs: this is the overhead figure) and the end (final table,
symbolisation, closing files).  The overhead is watching CPU time over the
wall time it was taken in: CMD is CPU-bound and pinned, so that is CPU time
per watched CPU.

A second, independent measure: the agent's whole CPU time from the kernel's
rusage of the child (``wait4``; CMD's CPU time, last polled from its own
schedstat, taken out, since the agent reaps it), against the sum of the three
parts from schedstat; they agree to within what the last polls miss.  The
agent's peak resident set is its ``VmHWM`` at the last poll (rusage's
``ru_maxrss`` would be CMD's, the larger of the two here).

``--versus-perf`` measures the cost as a user meets it instead, beside
``perf record``: runs of the bare command, of ``phasewatch run -q -- CMD``
and of ``perf record -q -F 1000 -e cpu-clock -o FILE -- CMD``, interleaved,
each timed from the rusage of the child and everything it reaped (wait4):
the whole command, start-up, end and symbolization included.  CMD is
``parts --scale S`` (tests/workloads/parts.c: three parts of fixed work, so
that the time the sampling interrupts take from CMD counts too, where
abab, which runs for a given CPU time, would absorb it).  Each
watcher's extra CPU is its run's less the bare run's next to it; the ratio
is phasewatch's extra over perf's, per round, and its median is the figure.

The phase catalogue is the benchmark's own (``XDG_STATE_HOME`` in its
temporary folder): the warm-up run makes it, as a user's first run of the
program would, and what this host's catalogue holds from other runs does not
enter the figures.  ``--first-runs`` gives every phasewatch run an empty
one instead: the cost of a program's first run, whose phases are all new.

``--phasewatch BIN`` (repeatable) compares installs side by side, runs
interleaved (A B A B ...), e.g. an older checkout's ``.venv/bin/phasewatch``
against this one's; ``--load`` runs ``stress-ng --cpu 0`` (every core) during
the runs.  The sampling interrupts themselves run in CMD's context (perf
accounts them to the sampled task), so they are not in the agent's figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from measure import cpu_load, spread

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"


@dataclass
class Sample:
    t: float            # monotonic seconds
    cpu_ns: int         # agent's threads, user + sys
    cmd_ns: int | None  # CMD's, while it runs
    hwm_kib: int        # the agent's peak resident set so far (VmHWM)

    @property
    def cmd_running(self) -> bool:
        return self.cmd_ns is not None


@dataclass
class RunFigures:
    startup_s: float
    watching_s: float
    watched_wall_s: float
    cmd_window_pct: float   # from CMD's exec to its end, the settling time included
    end_s: float
    rusage_s: float
    maxrss_mib: float

    @property
    def overhead_pct(self) -> float:
        return 100.0 * self.watching_s / self.watched_wall_s

    @property
    def schedstat_s(self) -> float:
        return self.startup_s + self.watching_s + self.end_s


def agent_cpu_ns(pid: int, seen: dict[str, int]) -> int:
    """The agent's CPU time: every thread's, a thread that has ended with the
    last value it was seen with (its time must not drop out of the sum)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                seen[tid] = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that has just ended
    return sum(seen.values())


def cmd_cpu_ns(pid: int, exe: str) -> int | None:
    """CMD's CPU time (a child of the agent running ``exe``), None if it is not running."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                children = f.read().split()
        except FileNotFoundError:
            continue
        for child in children:
            try:
                if os.readlink(f"/proc/{child}/exe") == exe:
                    with open(f"/proc/{child}/schedstat") as f:
                        return int(f.read().split()[0])
            except OSError:
                pass
    return None


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)


def observe(argv: list[str], exe: str, poll_s: float):
    """The polls of one run, and the agent's CPU seconds from its rusage (with
    CMD's, which the agent reaped, taken out)."""
    agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples, seen = [], {}
    while True:
        try:
            samples.append(Sample(time.monotonic(), agent_cpu_ns(agent.pid, seen),
                                  cmd_cpu_ns(agent.pid, exe), peak_rss_kib(agent.pid)))
        except (FileNotFoundError, ProcessLookupError):
            pass
        done, status, usage = os.wait4(agent.pid, os.WNOHANG)
        if done:
            break
        time.sleep(poll_s)
    agent.returncode = os.waitstatus_to_exitcode(status)
    if agent.returncode != 0:
        sys.exit(f"bench_run: {' '.join(argv)} exited {agent.returncode}")
    cmd_s = max((s.cmd_ns for s in samples if s.cmd_running), default=0) / 1e9
    return samples, usage.ru_utime + usage.ru_stime - cmd_s


def figures(samples: list[Sample], rusage_s: float, settle_s: float) -> RunFigures:
    running = [i for i, s in enumerate(samples) if s.cmd_running]
    if len(running) < 2:
        sys.exit("bench_run: CMD was seen running in fewer than two polls; run it longer")
    begin = samples[running[0]].t + settle_s
    watched = [i for i in running if samples[i].t >= begin]
    if len(watched) < 2:
        sys.exit(f"bench_run: CMD ran less than --settle {settle_s:g} s; run it longer")
    first, last = samples[watched[0]], samples[watched[-1]]
    final = max(samples[-1].cpu_ns, last.cpu_ns)
    exec_, end = samples[running[0]], samples[running[-1]]
    return RunFigures(cmd_window_pct=100 * (end.cpu_ns - exec_.cpu_ns) / 1e9 / (end.t - exec_.t),
                      startup_s=first.cpu_ns / 1e9,
                      watching_s=(last.cpu_ns - first.cpu_ns) / 1e9,
                      watched_wall_s=last.t - first.t,
                      end_s=(final - last.cpu_ns) / 1e9,
                      rusage_s=rusage_s, maxrss_mib=max(s.hwm_kib for s in samples) / 1024)


def rusage_seconds(argv: list[str], env: dict | None = None) -> float:
    """User + system CPU seconds of ``argv`` and all it reaped, from wait4."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_run: {' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime + usage.ru_stime


def versus_perf(bins: list[str], cmd: list[str], repeat: int, options: list[str],
                workdir: str, first_runs: bool = False) -> None:
    """Extra CPU over the bare command: phasewatch run's and perf record's,
    interleaved, with their ratio per round; with ``first_runs``, each
    phasewatch run has a catalogue of its own, empty."""
    perf_data = os.path.join(workdir, "perf.data")
    commands = {"bare": cmd,
                **{b: [b, "run", "-q", *options, "--", *cmd] for b in bins},
                "perf record": ["perf", "record", "-q", "-F", "1000", "-e", "cpu-clock",
                                "-o", perf_data, "--", *cmd]}
    for argv in commands.values():        # warm the page cache and the kernels' caches
        rusage_seconds(argv[:-1] + ["0.01"])
    taken: dict[str, list[float]] = {name: [] for name in commands}
    for k in range(repeat):
        for name, argv in commands.items():
            fresh = first_runs and name in bins
            env = {**os.environ, "XDG_STATE_HOME": os.path.join(workdir, f"first-{k}-{name}")}
            taken[name].append(rusage_seconds(argv, env if fresh else None))
    bare = taken["bare"]
    perf = [p - b for p, b in zip(taken["perf record"], bare)]
    print(f"command: {os.path.basename(cmd[0])} {' '.join(cmd[1:])}, {repeat} rounds of "
          f"{', '.join(commands)} interleaved; CPU from rusage (wait4), median (min-max)")
    print(f"  bare command, CPU s                 {spread(bare)}")
    print(f"  perf record -F 1000, extra CPU s    {spread(perf)}")
    for b in bins:
        extra = [p - q for p, q in zip(taken[b], bare)]
        ratio = [e / p for e, p in zip(extra, perf)]
        print(f"  {b} run {' '.join(options)}".rstrip())
        print(f"    extra CPU s                       {spread(extra)}")
        print(f"    ratio to perf record's extra      {spread(ratio)}  per round: "
              + ", ".join(f"{r:.2f}" for r in ratio))


def build_abab(workdir: str) -> str:
    subprocess.run(["make", "-s", "-C", str(ROOT / "tests" / "workloads"), f"OUT={workdir}",
                    "CC=gcc"], check=True)
    return os.path.join(workdir, "abab")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="abab's SECONDS: each of A, B, A runs this long (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--poll-ms", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=2.0, metavar="S",
                        help="seconds of CMD's run counted as start-up (default %(default)s)")
    parser.add_argument("--phasewatch", action="append", metavar="BIN",
                        help="the phasewatch command to measure; repeat to compare "
                             "(default: this environment's)")
    parser.add_argument("--load", action="store_true",
                        help="run stress-ng on every core meanwhile")
    parser.add_argument("--record", action="store_true", help="also record a trace")
    parser.add_argument("--versus-perf", action="store_true",
                        help="the whole command's extra CPU beside perf record -F 1000's, "
                             "from rusage, interleaved with bare runs; CMD is parts, "
                             "--seconds its --scale")
    parser.add_argument("--first-runs", action="store_true",
                        help="with --versus-perf, each phasewatch run starts with an empty "
                             "catalogue, as a program's first run does")
    parser.add_argument("--abab", action="store_true",
                        help="with --versus-perf, CMD is abab SECONDS (which runs for a given "
                             "CPU time: only the watchers' own processes count)")
    parser.add_argument("run_options", nargs="*", metavar="OPTION",
                        help="more options for 'phasewatch run' (after --)")
    args = parser.parse_args()
    if shutil.which("gcc") is None:
        sys.exit("bench_run: building abab needs gcc and make")
    bins = args.phasewatch or [str(BIN)]
    with tempfile.TemporaryDirectory() as workdir:
        os.environ["XDG_STATE_HOME"] = os.path.join(workdir, "state")
        exe = build_abab(workdir)
        options = list(args.run_options)
        if args.record:
            options += ["--record", os.path.join(workdir, "t.arrow")]
        if args.versus_perf:
            with cpu_load(args.load, "bench_run"):
                cmd = ([exe, str(args.seconds)] if args.abab else
                       [os.path.join(workdir, "parts"), "--scale", str(args.seconds)])
                versus_perf(bins, cmd, args.repeat, options, workdir, args.first_runs)
            return
        argvs = {b: [b, "run", *options, "--", exe, str(args.seconds)] for b in bins}
        runs: dict[str, list[RunFigures]] = {b: [] for b in bins}
        with cpu_load(args.load, "bench_run"):
            for argv in argvs.values():
                observe(argv[:-1] + ["0"], exe, args.poll_ms / 1000)   # warm caches
            for _ in range(args.repeat):
                for b, argv in argvs.items():
                    runs[b].append(figures(*observe(argv, exe, args.poll_ms / 1000),
                                           settle_s=args.settle))
    print("command: " + " ".join(["phasewatch run", *options, "--", "abab", str(args.seconds)])
          + (", stress-ng on every core" if args.load else ""))
    for b in bins:
        report(b, runs[b])


def report(binary: str, runs: list[RunFigures]) -> None:
    print(f"{binary}: {len(runs)} runs, median (min-max)")
    rows = [
        ("agent CPU while CMD runs, % of a core per watched CPU",
         spread(r.overhead_pct for r in runs)),
        ("  the same from CMD's exec (loading included)", spread(r.cmd_window_pct for r in runs)),
        ("start-up: agent CPU s before CMD and in its first seconds",
         spread(r.startup_s for r in runs)),
        ("end: agent CPU s after CMD ends", spread(r.end_s for r in runs)),
        ("whole run, agent CPU s: schedstat", spread(r.schedstat_s for r in runs)),
        ("whole run, agent CPU s: rusage less CMD's", spread(r.rusage_s for r in runs)),
        ("peak resident set, MiB (VmHWM)", spread(r.maxrss_mib for r in runs)),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    print("  per run: " + ", ".join(f"{r.overhead_pct:.2f} %" for r in runs))


if __name__ == "__main__":
    main()
