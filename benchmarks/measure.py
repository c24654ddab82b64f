"""What the cost benchmarks (bench_run.py, bench_daemon.py) share: a CPU load
to measure under, and the median with its range."""

from __future__ import annotations

import contextlib
import shutil
import statistics
import subprocess
import sys
import time


@contextlib.contextmanager
def cpu_load(on: bool, bench: str):
    """stress-ng on every core while the block runs (when ``on``)."""
    if not on:
        yield
        return
    if shutil.which("stress-ng") is None:
        sys.exit(f"{bench}: --load needs stress-ng (apt-get install stress-ng)")
    proc = subprocess.Popen(["stress-ng", "--cpu", "0", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        yield
    finally:
        proc.terminate()
        proc.wait()


def spread(values) -> str:
    """``median (min-max)``, two decimals."""
    values = list(values)
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
