"""Starting phasewatchd as a user does, on loopback ports, for the daemon tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

from phasewatch.core.batch import SampleBatch, concat
from phasewatch.formats import synthetic
from phasewatch.formats.trace import TraceWriter

BIN = Path(sys.executable).parent
DAEMON = BIN / "phasewatchd"
PHASEWATCH = BIN / "phasewatch"


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and never handed out before in this test run: the
    kernel may give a port that was just closed again, and two of a test's
    endpoints (metrics and ZeroMQ) would then meet on one port."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def write_trace(path: Path, cpus: int = 1, samples: int = 0) -> Path:
    """The synthetic example (its schedule repeated to ``samples``), on ``cpus``
    CPUs, each with its own noise, rows interleaved in time."""
    interval = 100_000_000
    schedule = synthetic.repeat_schedule(samples, interval) if samples else synthetic.SCHEDULE
    per_cpu = []
    for cpu in range(cpus):
        batch = concat(list(synthetic.generate(schedule, interval, seed=1 + cpu)))
        cols = dict(batch.columns)
        cols["cpu"] = np.full(len(batch), cpu, np.int32)
        per_cpu.append(SampleBatch(cols))
    joined = concat(per_cpu)
    order = np.argsort(joined["t_ns"], kind="stable")
    rows = SampleBatch({n: c[order] for n, c in joined.columns.items()})
    with TraceWriter(str(path), synthetic.metadata(interval, cpus), rows.signals) as w:
        for start in range(0, len(rows), 50_000):
            w.write(rows.slice(start, start + 50_000))
    return path


class Daemon:
    """A phasewatchd process; stopped with SIGTERM when the test ends."""

    def __init__(self, *args, metrics_port: int | None = None, zmq_port: int | None = None,
                 zmq: str | None = None):
        self.metrics_port = metrics_port or free_port()
        self.zmq_port = zmq_port or free_port()
        self.zmq = zmq or f"tcp://127.0.0.1:{self.zmq_port}"
        self.argv = [str(DAEMON), *map(str, args),
                     "--metrics", f"127.0.0.1:{self.metrics_port}", "--zmq", self.zmq]
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"phasewatchd exited {self.proc.returncode}: "
                                     f"{self.proc.stderr.read()}")
            try:
                self.metrics_text()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("phasewatchd did not serve metrics in time")

    def metric(self, name: str, **labels) -> float | None:
        """The value of one sample in the exposition, None if absent."""
        for line in self.metrics_text().splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, rest = head.partition("{")
            if metric != name:
                continue
            got = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",") if kv)
            if all(got.get(k) == f'"{v}"' for k, v in labels.items()):
                return float(value)
        return None

    def wait_metric(self, name: str, predicate, timeout: float = 60.0, **labels) -> float:
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.metric(name, **labels)
            if value is not None and predicate(value):
                return value
            time.sleep(0.2)
        raise AssertionError(f"{name}{labels} = {value} after {timeout} s")

    def stop(self, timeout: float = 10.0) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def refused(*args, timeout: float = 120) -> str:
    """phasewatchd ARGS must refuse to start: exit 2 and one line, which is returned."""
    proc = subprocess.run([str(DAEMON), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]
