#!/usr/bin/env python3
"""Cost of ``phasewatchd`` while it watches: its CPU time per second and per
watched CPU, and its resident set.

Two modes, each run --repeat times:

``replay``
    the daemon replays a synthetic trace of --cpus CPUs at 1 kHz each in real
    time (--replay-speed 1), serving metrics and publishing events, with one
    subscriber reading them all;
``live``
    the daemon samples every CPU of this host through the source registry
    (``[source] kind = "perf"``), 200 ms intervals;
``process``
    the daemon watches one process target by command name (``commands``), a
    shell script that runs children in a loop, learning their mappings from
    perf's records: ``--children gzip`` (gzip of 3 MB, about 0.3 s a child
    here: a script's everyday work) or ``--children true`` (/bin/true, as
    fast as the shell forks: hundreds of processes a second).  Its CPU time
    is divided by the CPUs of the host (the target's events are on each).

After start-up (the first --warmup seconds), the daemon's own CPU time over
--seconds of wall time, divided by the CPUs watched, two ways: summed over its
threads from /proc/PID/task/*/schedstat (nanoseconds), and from
/proc/PID/stat (user + sys, clock ticks: coarse, the independent check).
Each figure is the median over the runs, with the range beside it; the
resident set is the daemon's peak (VmHWM) at the end of the run.

``--phasewatchd BIN`` (repeatable) compares installs side by side, runs
interleaved; ``--catalog-both`` compares the phase catalogue on (its file in
a fresh folder each run) and off (``--no-catalog``) likewise; ``--load``
runs ``stress-ng --cpu 0`` (every core) meanwhile.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from daemonutil import DAEMON, free_port, write_trace  # noqa: E402
from measure import cpu_load, spread  # noqa: E402

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """user + sys from /proc/PID/stat, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def schedstat_seconds(pid: int) -> float:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def loop_body(folder: Path, children: str) -> str:
    """The shell loop that runs ``children`` until killed."""
    if children == "gzip":
        data = folder / "data"
        rng = random.Random(7)
        words = [bytes(rng.choices(b"abcdefghij", k=rng.randint(3, 9))) for _ in range(2000)]
        data.write_bytes(b" ".join(rng.choices(words, k=450_000)))
        return f"while :; do gzip -c {data} > /dev/null; done"
    return "while :; do /bin/true; done"


def looping_script(folder: Path, body: str) -> Path:
    """A script named as no other process (each run its own name, its own
    target), that waits for a line on its standard input and then runs
    ``body``."""
    path = folder / f"pwb{uuid.uuid4().hex[:8]}"
    path.write_text(f"#!/bin/bash\nread go\n{body}\n")
    path.chmod(0o755)
    return path


def process_config(folder: Path, script: Path) -> Path:
    config = folder / f"{script.name}.toml"
    config.write_text(f'[source]\nkind = "perf"\n[targets]\ncpus = []\n'
                      f'commands = ["{script.name}"]\nrescan_seconds = 0.5\n'
                      '[detector]\nname = "vpf-ip"\ninterval_ms = 200\n')
    return config


def exited(metrics: str, target: str) -> float:
    """The target's processes seen to end so far (nan: a daemon without the counter)."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f'phasewatch_processes_exited_total{{target="{target}"}}'):
                return float(line.rsplit(" ", 1)[1])
    return math.nan


def watched_by(metrics: str, target: str, timeout: float = 180.0) -> None:
    """Wait until the daemon serving ``metrics`` shows ``target``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as r:
                if f'target="{target}"' in r.read().decode():
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"bench_daemon: the daemon did not watch {target} within {timeout:g} s")


def one_run(daemon: str, argv, seconds: float, warmup: float,
            subscribe: bool, script: Path | None = None) -> tuple[float, float, float]:
    """CPU share by schedstat and by stat ticks, and the peak resident set;
    ``script``: the process target's, run once the daemon watches it."""
    zmq_port = free_port()
    metrics = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([daemon, *argv, "--metrics", metrics,
                             "--zmq", f"tcp://127.0.0.1:{zmq_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    looping = sub = None
    if subscribe:
        sub = subprocess.Popen([str(Path(sys.executable).parent / "phasewatch"), "subscribe",
                                "interval.", "phase.", "--endpoint",
                                f"tcp://127.0.0.1:{zmq_port}"], stdout=subprocess.DEVNULL)
    try:
        if script is not None:
            looping = subprocess.Popen([str(script)], stdin=subprocess.PIPE,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True)
            watched_by(metrics, f"comm:{script.name}")
            looping.stdin.write(b"go\n")
            looping.stdin.close()
        time.sleep(warmup)
        if proc.poll() is not None:
            sys.exit(f"bench_daemon: {daemon} {' '.join(argv)} exited {proc.returncode}")
        target = f"comm:{script.name}" if script is not None else None
        e0 = exited(metrics, target) if target else math.nan
        s0, c0, t0 = schedstat_seconds(proc.pid), cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        s1, c1, t1 = schedstat_seconds(proc.pid), cpu_seconds(proc.pid), time.monotonic()
        e1 = exited(metrics, target) if target else math.nan
        return ((s1 - s0) / (t1 - t0), (c1 - c0) / (t1 - t0), peak_rss_mib(proc.pid),
                (e1 - e0) / (t1 - t0))
    finally:
        proc.terminate()
        proc.wait()
        if looping:
            os.killpg(looping.pid, signal.SIGKILL)
            looping.wait()
        if sub:
            sub.kill()
            sub.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("replay", "live", "process"), default="replay")
    p.add_argument("--children", choices=("gzip", "true"), default="gzip",
                   help="what the watched script runs in a loop (--mode process)")
    p.add_argument("--cpus", type=int, default=2, help="CPUs in the replayed trace")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--phasewatchd", action="append", metavar="BIN",
                   help="the daemon to measure; repeat to compare (default: this environment's)")
    p.add_argument("--load", action="store_true", help="run stress-ng on every core meanwhile")
    p.add_argument("--catalog-both", action="store_true",
                   help="each daemon with the phase catalogue on and off, side by side")
    args = p.parse_args()
    daemons = args.phasewatchd or [str(DAEMON)]
    variants = ([(d, "catalogue on"), (d, "catalogue off")] if args.catalog_both else [(d, "")]
                for d in daemons)
    daemons = [v for vs in variants for v in vs]
    runs: dict = {d: [] for d in daemons}
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode == "replay":
            samples = int((args.seconds + args.warmup + 10) * 1000)
            trace = write_trace(Path(tmp) / "t.arrow", cpus=args.cpus, samples=samples)
            argv, cpus = ["--replay", str(trace), "--replay-speed", "1"], args.cpus
        elif args.mode == "live":
            config = Path(tmp) / "live.toml"
            config.write_text('[source]\nkind = "perf"\n[detector]\nname = "vpf-ip"\n'
                              'interval_ms = 200\n')
            argv, cpus = ["--config", str(config)], os.cpu_count()
        else:
            body = loop_body(Path(tmp), args.children)
            argv, cpus = [], os.cpu_count()
        with cpu_load(args.load, "bench_daemon"):
            for k in range(args.repeat):
                for daemon, variant in daemons:
                    extra = {"catalogue on": ["--catalog", f"{tmp}/catalog-{k}.sqlite"],
                             "catalogue off": ["--no-catalog"], "": []}[variant]
                    script = None
                    if args.mode == "process":
                        script = looping_script(Path(tmp), body)
                        argv = ["--config", str(process_config(Path(tmp), script))]
                    runs[daemon, variant].append(one_run(
                        daemon, argv + extra, args.seconds, args.warmup, args.mode == "replay",
                        script))
    what = f"process, children {args.children}" if args.mode == "process" else args.mode
    print(f"phasewatchd {what}, {cpus} CPUs at 1 kHz, {args.seconds:g} s after "
          f"{args.warmup:g} s start-up, {args.repeat} runs"
          + (", stress-ng on every core" if args.load else "") + "; median (min-max)")
    for daemon, variant in daemons:
        report(f"{daemon}" + (f", {variant}" if variant else ""), runs[daemon, variant], cpus)
    return 0


def report(daemon: str, runs, cpus: int) -> None:
    print(f"{daemon}:")
    print(f"  CPU per watched CPU, % of a core (schedstat)   {spread(100 * r[0] / cpus for r in runs)}")
    print(f"  CPU per watched CPU, % of a core (stat ticks)  {spread(100 * r[1] / cpus for r in runs)}")
    print(f"  peak resident set, MiB                         {spread(r[2] for r in runs)}")
    if not any(math.isnan(r[3]) for r in runs):     # a process target's children
        print(f"  children ended a second                        {spread(r[3] for r in runs)}")
        print(f"  CPU per child ended, µs (schedstat)            "
              f"{spread(1e6 * r[0] / r[3] for r in runs if r[3])}")


if __name__ == "__main__":
    sys.exit(main())
