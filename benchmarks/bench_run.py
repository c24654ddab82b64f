#!/usr/bin/env python3
"""Overhead of ``phasewatch run``: the agent's own CPU time per second of CMD's run.

Runs ``phasewatch run [OPTIONS] -- abab SECONDS`` (region A, B, A, each
SECONDS of CPU) --repeat times, and watches the agent process from outside
every --poll-ms:

* the agent's CPU time, user + sys, summed over all its threads, from
  ``/proc/AGENT/task/*/schedstat`` (nanoseconds; CMD's time is not in it);
* the user/sys split from ``/proc/AGENT/stat`` (clock ticks, so coarse);
* whether CMD is running: a child of the agent whose executable is abab.

The agent's time is split at CMD's exec and exit into start-up (interpreter,
imports, numba cache load, opening the perf events), watching (the live loop
while CMD runs: this is the overhead figure), and the end (final table,
symbolisation, closing files).  The overhead is watching CPU time over CMD's
wall time: CMD is CPU-bound and pinned, so that is CPU time of one watched CPU.
Each figure is the median over the runs.

The sampling interrupts themselves run in CMD's context (perf accounts them to
the sampled task), so they are not in the agent's figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    t: float            # monotonic seconds
    cpu_ns: int         # agent's threads, user + sys
    user_ticks: int
    sys_ticks: int
    cmd_running: bool


@dataclass
class RunFigures:
    startup_s: float
    watching_s: float
    end_s: float
    cmd_wall_s: float
    user_s: float
    sys_s: float

    @property
    def overhead_pct(self) -> float:
        return 100.0 * self.watching_s / self.cmd_wall_s


def agent_cpu_ns(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that has just ended
    return total


def agent_ticks(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])   # utime, stime (own threads only)


def cmd_running(pid: int, exe: str) -> bool:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                children = f.read().split()
        except FileNotFoundError:
            continue
        for child in children:
            try:
                if os.readlink(f"/proc/{child}/exe") == exe:
                    return True
            except OSError:
                pass
    return False


def observe(argv: list[str], exe: str, poll_s: float) -> list[Sample]:
    agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples = []
    while agent.poll() is None:
        try:
            user, system = agent_ticks(agent.pid)
            samples.append(Sample(time.monotonic(), agent_cpu_ns(agent.pid), user, system,
                                  cmd_running(agent.pid, exe)))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(poll_s)
    _, err = agent.communicate()
    if agent.returncode != 0:
        sys.exit(f"bench_run: {' '.join(argv)} exited {agent.returncode}: {err.decode().strip()}")
    return samples


def figures(samples: list[Sample]) -> RunFigures:
    running = [i for i, s in enumerate(samples) if s.cmd_running]
    if len(running) < 2:
        sys.exit("bench_run: CMD was seen running in fewer than two polls; run it longer")
    first, last, final = samples[running[0]], samples[running[-1]], samples[-1]
    return RunFigures(
        startup_s=first.cpu_ns / 1e9,
        watching_s=(last.cpu_ns - first.cpu_ns) / 1e9,
        end_s=(final.cpu_ns - last.cpu_ns) / 1e9,
        cmd_wall_s=last.t - first.t,
        user_s=(last.user_ticks - first.user_ticks) * TICK_S,
        sys_s=(last.sys_ticks - first.sys_ticks) * TICK_S)


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
    parser.add_argument("--record", action="store_true", help="also record a trace")
    parser.add_argument("run_options", nargs="*", metavar="OPTION",
                        help="more options for 'phasewatch run' (after --)")
    args = parser.parse_args()
    if shutil.which("gcc") is None:
        sys.exit("bench_run: building abab needs gcc and make")
    with tempfile.TemporaryDirectory() as workdir:
        exe = build_abab(workdir)
        options = list(args.run_options)
        if args.record:
            options += ["--record", os.path.join(workdir, "t.arrow")]
        argv = [str(BIN), "run", *options, "--", exe, str(args.seconds)]
        observe(argv[:-1] + ["0"], exe, args.poll_ms / 1000)   # warm the numba cache
        runs = [figures(observe(argv, exe, args.poll_ms / 1000)) for _ in range(args.repeat)]
    report(argv, runs)


def report(argv: list[str], runs: list[RunFigures]) -> None:
    def med(key) -> float:
        return statistics.median(getattr(r, key) if isinstance(key, str) else key(r)
                                 for r in runs)
    options = argv[2:argv.index("--")]
    print("command: " + " ".join(["phasewatch run", *options, "--", "abab", argv[-1]]))
    print(f"runs: {len(runs)}, median of each figure; CMD ran {med('cmd_wall_s'):.1f} s per run")
    rows = [
        ("agent CPU while CMD runs, per second of CMD", f"{med('overhead_pct'):.2f} %"),
        ("  of which user (tick resolution)",
         f"{med(lambda r: 100 * r.user_s / r.cmd_wall_s):.2f} %"),
        ("  of which sys (tick resolution)",
         f"{med(lambda r: 100 * r.sys_s / r.cmd_wall_s):.2f} %"),
        ("start-up: agent CPU before CMD runs", f"{1000 * med('startup_s'):.0f} ms"),
        ("end: agent CPU after CMD ends", f"{1000 * med('end_s'):.0f} ms"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>9}")
    print("  per run: " + ", ".join(f"{r.overhead_pct:.2f} %" for r in runs))


if __name__ == "__main__":
    main()
