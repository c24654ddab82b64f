"""The per-CPU hardware signals the daemon reports: latest values and windows.

Kept per CPU from the raw columns of each batch: the latest raw counters
(APERF, MPERF, PPERF, TSC, C3/C6/C7, package energy) and core voltage.  Once a
second :meth:`HostSignals.tick` turns the counters' growth since the previous
tick into the frequency and residency gauges.  Every sample's voltage and
productive frequency (from the one decoder, :func:`phasewatch.core.decode.decode`)
also go into cumulative histogram buckets, for heatmaps.  Memory is a few
numbers per CPU, whatever the run length.
"""

from __future__ import annotations

import threading

import numpy as np

from ..core.batch import MISSING, SampleBatch
from ..core.decode import DecoderState, F, decode
from ..core.source import Sink

RAW_COUNTERS = ("aperf", "mperf", "pperf", "tsc", "c3", "c6", "c7")
CSTATES = ("c1", "c3", "c6", "c7")
#: Histogram bucket upper bounds: volts and hertz.
VOLTAGE_BUCKETS = tuple(round(0.60 + 0.02 * i, 2) for i in range(46))         # 0.60..1.50 V
PFREQ_BUCKETS = tuple(float(100e6 * i) for i in range(1, 61))                 # 0.1..6 GHz
ENERGY_WRAP_UJ = 1 << 32


class Histogram:
    """Cumulative-style bucket counts, their sum and count."""

    def __init__(self, bounds):
        self.bounds = np.asarray(bounds, np.float64)
        self.counts = np.zeros(len(bounds) + 1, np.int64)     # last: above every bound
        self.sum = 0.0

    def add(self, values: np.ndarray) -> None:
        values = values[np.isfinite(values)]
        if len(values) == 0:
            return
        idx = np.searchsorted(self.bounds, values, side="left")
        self.counts += np.bincount(idx, minlength=len(self.counts))
        self.sum += float(values.sum())

    def buckets(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, +Inf last, as prometheus_client wants them."""
        cum = np.cumsum(self.counts).tolist()
        return [(repr(float(b)), c) for b, c in zip(self.bounds.tolist(), cum)] + [("+Inf", cum[-1])]


class HostSignals(Sink):
    """Latest per-CPU signals from the batches taken, for the metrics."""

    def __init__(self, base_mhz: float, voltage_from_perf_status: bool = True,
                 package_of=lambda cpu: 0):
        self.base_mhz = float(base_mhz or 0.0)
        self.voltage_from_perf_status = voltage_from_perf_status
        self.package_of = package_of
        self.decoder = DecoderState(counters=("aperf", "mperf", "pperf", "tsc"))
        self.lock = threading.Lock()
        self.last: dict[int, dict[str, int]] = {}          # cpu -> counter -> raw
        self.at_tick: dict[int, dict[str, int]] = {}
        self.volts: dict[int, float] = {}
        self.freq_hz: dict[int, float] = {}
        self.pfreq_hz: dict[int, float] = {}
        self.residency: dict[int, dict[str, float]] = {}
        self.energy: dict[int, list[int]] = {}              # package -> [start, last, wrapped]
        self.voltage_hist = Histogram(VOLTAGE_BUCKETS)
        self.pfreq_hist = Histogram(PFREQ_BUCKETS)

    def batch(self, batch: SampleBatch) -> None:
        if len(batch) == 0:
            return
        decoded = decode(batch, self.decoder, self.base_mhz, self.voltage_from_perf_status)
        cpus = batch["cpu"]
        # The last row of each CPU in the batch.
        order = np.unique(cpus[::-1], return_index=True)
        last_rows = {int(c): len(cpus) - 1 - int(i) for c, i in zip(*order)}
        with self.lock:
            self.voltage_hist.add(decoded[F["voltage_mv"]] / 1e3)
            self.pfreq_hist.add(decoded[F["pfreq_mhz"]] * 1e6)
            for cpu, row in last_rows.items():
                self._latest(batch, cpu, row, decoded)

    def _latest(self, batch: SampleBatch, cpu: int, row: int, decoded) -> None:
        raw = self.last.setdefault(cpu, {})
        for name in RAW_COUNTERS:
            if name in batch and batch[name][row] != MISSING:
                raw[name] = int(batch[name][row])
        v = decoded[F["voltage_mv"], row]
        if v == v:
            self.volts[cpu] = float(v) / 1e3
        if "energy_pkg_uj" in batch and batch["energy_pkg_uj"][row] != MISSING:
            self._energy(self.package_of(cpu), int(batch["energy_pkg_uj"][row]))

    def _energy(self, package: int, uj: int) -> None:
        e = self.energy.get(package)
        if e is None:
            self.energy[package] = [uj, uj, 0]
        elif uj >= e[1]:
            e[1] = uj
        elif e[1] - uj > ENERGY_WRAP_UJ // 2:      # the RAPL counter wrapped
            e[2] += e[1] - e[0]
            e[0] = e[1] = uj

    def tick(self) -> None:
        """Turn the counters' growth since the previous tick into gauges."""
        with self.lock:
            for cpu, now in self.last.items():
                before = self.at_tick.get(cpu)
                self.at_tick[cpu] = dict(now)
                if before is not None:
                    self._window(cpu, {k: now[k] - before[k] for k in now if k in before})

    def _window(self, cpu: int, d: dict[str, int]) -> None:
        dm, dt = d.get("mperf", 0), d.get("tsc", 0)
        if dm > 0 and self.base_mhz > 0:
            if d.get("aperf", -1) >= 0 and "aperf" in d:
                self.freq_hz[cpu] = self.base_mhz * 1e6 * d["aperf"] / dm
            if d.get("pperf", -1) >= 0 and "pperf" in d:
                self.pfreq_hz[cpu] = self.base_mhz * 1e6 * d["pperf"] / dm
        if dt > 0 and dm >= 0 and "mperf" in d:
            deep = {s: max(d.get(s, 0), 0) for s in ("c3", "c6", "c7")}
            c1 = max(dt - dm - sum(deep.values()), 0)
            self.residency[cpu] = {"c1": c1 / dt, **{s: v / dt for s, v in deep.items()}}

    def energy_joules(self) -> dict[int, float]:
        with self.lock:
            return {p: (e[2] + e[1] - e[0]) / 1e6 for p, e in self.energy.items()}

    def forget(self, cpus) -> None:
        with self.lock:
            for table in (self.last, self.at_tick, self.volts, self.freq_hz, self.pfreq_hz,
                          self.residency):
                for cpu in cpus:
                    table.pop(cpu, None)
