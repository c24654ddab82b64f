"""A synthetic, Skylake-like sample stream with a known phase schedule.

The model: one CPU pinned at 3.0 GHz base (TSC, APERF and MPERF all tick at
3 GHz, the core never idles), sampled every millisecond.  Each phase has a
core voltage, a productive share of clocks (PPERF/APERF), a CPI and a region of
a 2 MiB ``.text`` where its instruction pointers fall (four hot spots in it), each
with per-sample noise.  ``compute-b`` has the same voltage, frequency and CPI as
``compute-a`` but runs other code: only the IP vector tells them apart.

Each phase's stretch of the schedule retires exactly ``n × interval`` instructions
(its last sample is shortened to end there), so interval ``k`` belongs wholly to
one phase and the schedule gives the ground-truth label of every interval.

The values are invented to resemble the thesis's Xeon E3-1220 v5 (voltages
within 962–1080 mV); they are not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..core.batch import SampleBatch
from ..core.cpumodels import SKYLAKE
from ..core.params import HistogramParams, IntervalParams
from ..core.registers import perf_status_of
from . import metadata as md

BASE_MHZ = 3000.0
TICK_NS = 1_000_000
CLOCKS_PER_TICK = int(BASE_MHZ * 1e3)         # 3 GHz × 1 ms
TEXT_START = 0x401000
TEXT_SIZE = 2 << 20
RATIO_BITS = np.uint64(30 << 8)               # IA32_PERF_STATUS 15:8: ratio 30 (3.0 GHz)


@dataclass(frozen=True)
class Phase:
    name: str
    voltage_mv: float
    voltage_sd: float
    productive: float        # PPERF / APERF
    productive_sd: float
    cpi: float
    cpi_sd: float            # relative (log-normal sigma)
    code: tuple[float, float]  # share of .text where the hot spots lie
    power_w: float
    hot_spots: tuple[float, ...]  # where in that share, drawn once at random
    #: Instead of hot spots: code regions (start, size in bytes, share of
    #: samples), IPs uniform inside each.
    regions: tuple[tuple[int, int, float], ...] = ()


PHASES = {
    p.name: p for p in (
        Phase("compute-a", 1046.0, 3.0, 0.96, 0.02, 0.45, 0.06, (0.10, 0.20), 48.0,
              (0.127, 0.414, 0.551, 0.903)),
        Phase("memory", 1001.0, 3.0, 0.34, 0.03, 2.80, 0.08, (0.45, 0.50), 31.0,
              (0.071, 0.298, 0.633, 0.779)),
        Phase("mixed", 1022.0, 3.0, 0.68, 0.03, 1.10, 0.07, (0.70, 0.80), 39.0,
              (0.215, 0.382, 0.706, 0.958)),
        Phase("compute-b", 1046.0, 3.0, 0.96, 0.02, 0.46, 0.06, (0.85, 0.95), 48.0,
              (0.044, 0.337, 0.512, 0.861)),
    )
}

SCHEDULE = (("compute-a", 40), ("memory", 30), ("compute-a", 20), ("mixed", 30),
            ("compute-b", 25), ("memory", 20), ("compute-a", 20), ("compute-b", 15))


def metadata(interval: int, cpus: int = 1) -> dict:
    hp = HistogramParams.for_model(SKYLAKE, text_range=(TEXT_START, TEXT_START + TEXT_SIZE))
    cpu = {"vendor": "GenuineIntel", "family": 6, "model": 0x5E,
           "model_name": "synthetic Skylake-like model (not a measurement)",
           "model_key": SKYLAKE.key}
    signals = {n: "synthetic" for n in ("t_ns", "cpu", "tid", "ip", "perf_status", "aperf",
                                         "mperf", "pperf", "tsc", "instructions", "cycles",
                                         "c3", "c6", "c7", "energy_pkg_uj")}
    return md.new(cpu=cpu, base_freq_mhz=BASE_MHZ, signals=signals,
                  interval=IntervalParams(instructions=interval), histograms=hp,
                  text_range=[TEXT_START, TEXT_START + TEXT_SIZE], synthetic=True)


def labels(schedule=SCHEDULE) -> list[str]:
    return [name for name, n in schedule for _ in range(n)]


def repeat_schedule(min_samples: int, interval: int, schedule=SCHEDULE, phases=PHASES):
    """The schedule repeated until it yields at least ``min_samples`` samples."""
    per_cycle = sum(n * interval * phases[p].cpi / CLOCKS_PER_TICK for p, n in schedule)
    cycles = int(np.ceil(min_samples / per_cycle))
    return tuple(schedule) * max(cycles, 1)


def generate(schedule=SCHEDULE, interval: int = 100_000_000, seed: int = 1,
             tid: int = 4242, phases=PHASES) -> Iterator[SampleBatch]:
    """One batch per stretch of the schedule, counters cumulative across them."""
    rng = np.random.default_rng(seed)
    state = {"t": 0, "clocks": 0, "instr": 0, "pperf": 0, "energy": 0}
    yield _baseline(tid)
    for name, n in schedule:
        yield _stretch(phases[name], n * interval, rng, state, tid)


def _stretch(p: Phase, instructions: int, rng, state, tid) -> SampleBatch:
    mean_per_tick = CLOCKS_PER_TICK / p.cpi
    m = int(instructions / mean_per_tick * 1.5) + 16
    cpi = p.cpi * rng.lognormal(0.0, p.cpi_sd, m)
    instr = np.floor(CLOCKS_PER_TICK / cpi).astype(np.int64)
    total = np.cumsum(instr)
    last = int(np.searchsorted(total, instructions))
    instr = instr[:last + 1]
    instr[-1] = instructions - (total[last - 1] if last else 0)
    share = instr / np.floor(CLOCKS_PER_TICK / cpi[:last + 1])
    clocks = np.maximum(np.round(CLOCKS_PER_TICK * share).astype(np.int64), 1)
    k = len(instr)
    productive = np.clip(rng.normal(p.productive, p.productive_sd, k), 0.01, 1.0)
    volt = rng.normal(p.voltage_mv, p.voltage_sd, k)
    cols = {
        "t_ns": state["t"] + np.cumsum(np.round(TICK_NS * share).astype(np.int64)),
        "cpu": np.zeros(k, np.int32),
        "tid": np.full(k, tid, np.int32),
        "ip": _ips(p, rng, k),
        "perf_status": perf_status_of(volt / 1000.0, RATIO_BITS),
        "aperf": state["clocks"] + np.cumsum(clocks),
        "pperf": state["pperf"] + np.cumsum(np.round(clocks * productive).astype(np.int64)),
        "instructions": state["instr"] + np.cumsum(instr),
        "c3": np.zeros(k, np.int64), "c6": np.zeros(k, np.int64), "c7": np.zeros(k, np.int64),
        "energy_pkg_uj": state["energy"] + np.cumsum(np.round(p.power_w * share * 1e3).astype(np.int64)),
    }
    cols["mperf"] = cols["tsc"] = cols["cycles"] = cols["aperf"]
    state.update(t=int(cols["t_ns"][-1]), clocks=int(cols["aperf"][-1]),
                 instr=int(cols["instructions"][-1]), pperf=int(cols["pperf"][-1]),
                 energy=int(cols["energy_pkg_uj"][-1]))
    return SampleBatch(cols)


def _baseline(tid) -> SampleBatch:
    """The first read: every counter at zero, the reference for the first deltas."""
    zeros = {n: np.zeros(1, np.uint64) for n in ("ip", "perf_status", "aperf", "mperf", "pperf",
                                                  "tsc", "instructions", "cycles", "c3", "c6",
                                                  "c7", "energy_pkg_uj")}
    return SampleBatch({"t_ns": np.zeros(1, np.int64), "cpu": np.zeros(1, np.int32),
                        "tid": np.full(1, tid, np.int32), **zeros})


def _ips(p: Phase, rng, k: int) -> np.ndarray:
    if p.regions:
        starts, sizes, shares = (np.array(col, np.float64) for col in zip(*p.regions))
        which = rng.choice(len(starts), size=k, p=shares / shares.sum())
        return (TEXT_START + starts[which] + np.floor(rng.random(k) * sizes[which])).astype(np.uint64)
    lo = TEXT_START + p.code[0] * TEXT_SIZE
    span = (p.code[1] - p.code[0]) * TEXT_SIZE
    spots = lo + span * np.array(p.hot_spots)
    which = rng.choice(4, size=k, p=[0.4, 0.3, 0.2, 0.1])
    return np.round(spots[which] + rng.normal(0, 96, k)).astype(np.uint64)


# ----------------------------------------------------------------------------
# Eight phases in small code regions: the harder case.

WIDE_TEXT_SIZE = 1_800 << 10         # 1.8 MiB of text
#: (voltage mV, productive share, CPI, power W) of the eight phases; the last
#: two are alike in voltage and frequency and differ only in their code.
EIGHT_SIGNALS = ((970.0, 0.30, 3.0, 28.0), (988.0, 0.42, 2.2, 31.0), (1004.0, 0.52, 1.6, 34.0),
                 (1020.0, 0.62, 1.2, 38.0), (1036.0, 0.74, 0.9, 42.0), (1052.0, 0.84, 0.7, 45.0),
                 (1068.0, 0.94, 0.5, 48.0), (1068.0, 0.94, 0.52, 48.0))


def eight_phases(seed: int) -> dict[str, Phase]:
    """Eight phases, each running 1-4 code regions of 2-32 KiB placed at random
    in a 1.8 MiB text; ``p6`` and ``p7`` share voltage and frequency."""
    rng = np.random.default_rng(seed)
    phases = {}
    for i, (volt, productive, cpi, power) in enumerate(EIGHT_SIGNALS):
        sizes = rng.integers(2 << 10, (32 << 10) + 1, int(rng.integers(1, 5)))
        starts = [int(rng.integers(0, WIDE_TEXT_SIZE - size)) for size in sizes]
        shares = rng.dirichlet(np.ones(len(sizes)) * 2.0)
        phases[f"p{i}"] = Phase(f"p{i}", volt, 3.0, productive, 0.02, cpi, 0.06, (0.0, 1.0), power,
                                (), tuple(zip(starts, (int(x) for x in sizes), shares)))
    return phases


def eight_phase_schedule(seed: int, stretches: int = 32) -> tuple:
    """``stretches`` stretches of 3-12 intervals; every phase at least twice,
    never the same phase twice in a row."""
    rng = np.random.default_rng(seed + 1000)
    names = [f"p{i}" for i in range(len(EIGHT_SIGNALS))]
    order = names * 2 + list(rng.choice(names, stretches - 2 * len(names)))
    rng.shuffle(order)
    for i in range(1, len(order)):
        if order[i] == order[i - 1]:
            order[i] = names[(names.index(order[i]) + 1) % len(names)]
    return tuple((name, int(rng.integers(3, 13))) for name in order)


def eight_phase_metadata(interval: int) -> dict:
    """Metadata of an eight-phase trace: the text is one mapping of a program."""
    meta = metadata(interval)
    meta["text_range"] = [TEXT_START, TEXT_START + WIDE_TEXT_SIZE]
    meta["histograms"]["text_range"] = meta["text_range"]
    meta["mappings"] = [{"start": TEXT_START, "end": TEXT_START + WIDE_TEXT_SIZE,
                         "offset": 0x1000, "path": "/opt/synthetic/program"}]
    return meta
