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
    (``[source] kind = "perf"``), 200 ms intervals.

After start-up (the first --warmup seconds), the daemon's own CPU time
(user + sys, all threads, from /proc/PID/stat) over --seconds of wall time,
divided by the CPUs watched.  Each figure is the median over the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from daemonutil import DAEMON, free_port, write_trace  # noqa: E402

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one_run(argv, seconds: float, warmup: float, subscribe: bool) -> tuple[float, float]:
    zmq_port = free_port()
    proc = subprocess.Popen([str(DAEMON), *argv, "--metrics", f"127.0.0.1:{free_port()}",
                             "--zmq", f"tcp://127.0.0.1:{zmq_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sub = None
    if subscribe:
        sub = subprocess.Popen([str(Path(sys.executable).parent / "phasewatch"), "subscribe",
                                "interval.", "phase.", "--endpoint",
                                f"tcp://127.0.0.1:{zmq_port}"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(warmup)
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        return (c1 - c0) / (t1 - t0), rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
        if sub:
            sub.kill()
            sub.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("replay", "live"), default="replay")
    p.add_argument("--cpus", type=int, default=2, help="CPUs in the replayed trace")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode == "replay":
            samples = int((args.seconds + args.warmup + 10) * 1000)
            trace = write_trace(Path(tmp) / "t.arrow", cpus=args.cpus, samples=samples)
            argv, cpus = ["--replay", str(trace), "--replay-speed", "1"], args.cpus
        else:
            config = Path(tmp) / "live.toml"
            config.write_text('[source]\nkind = "perf"\n[detector]\nname = "vpf-ip"\n'
                              'interval_ms = 200\n')
            argv, cpus = ["--config", str(config)], os.cpu_count()
        runs = [one_run(argv, args.seconds, args.warmup, args.mode == "replay")
                for _ in range(args.repeat)]
    shares = [100 * c / cpus for c, _ in runs]
    print(f"phasewatchd {args.mode}, {cpus} CPUs at 1 kHz, {args.seconds:g} s after "
          f"{args.warmup:g} s start-up, {args.repeat} runs")
    print(f"  CPU per watched CPU: median {statistics.median(shares):.2f} % of a core "
          f"(runs: {', '.join(f'{s:.2f}' for s in shares)})")
    print(f"  resident set: median {statistics.median(r for _, r in runs):.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
