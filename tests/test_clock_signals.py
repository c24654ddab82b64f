"""The clock (APERF/MPERF) and the busy share (C0 residency, MPERF/TSC) in
``vpf-ip``: each separates phases the code alone cannot, and where it stays
put it changes nothing (docs/detectors.md)."""

import numpy as np
from phasewatch.core.batch import SampleBatch
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import synthetic
from phasewatch.formats.results import adjusted_rand_index
from phasewatch.report.figure import FigureRecorder

INTERVAL = 100_000_000
SAMPLES = 30                                 # an interval's samples, as users get them
TSC_PER_SAMPLE = 3_000_000                   # 1 ms at 3 GHz
#: One program's hot spots: every interval runs the same code.
REGIONS = [(synthetic.TEXT_START + k * (200 << 10), 4 << 10) for k in range(8)]
WEIGHTS = np.array([8.0, 4.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.25])


def trace(busy: list[float], clock: list[float], seed: int = 3, drop=(),
          vcore_mv: list[float] | None = None) -> SampleBatch:
    """Intervals of the same code, each with its busy share (MPERF/TSC) and
    clock (APERF/MPERF), both with per-sample noise; ``drop`` leaves columns out."""
    rng = np.random.default_rng(seed)
    n = len(busy) * SAMPLES
    which = rng.choice(len(REGIONS), n, p=WEIGHTS / WEIGHTS.sum())
    starts = np.array([s for s, _ in REGIONS], np.uint64)
    ip = starts[which] + rng.integers(0, 4 << 10, n).astype(np.uint64)
    c0 = np.clip(np.repeat(busy, SAMPLES) + rng.normal(0, 0.03, n), 0.01, 1.0)
    ratio = np.repeat(clock, SAMPLES) * rng.normal(1.0, 0.01, n)
    mperf = np.cumsum(np.round(c0 * TSC_PER_SAMPLE)).astype(np.uint64)
    aperf = np.cumsum(np.round(c0 * ratio * TSC_PER_SAMPLE)).astype(np.uint64)
    step = INTERVAL // SAMPLES
    columns = {"t_ns": np.arange(1, n + 1, dtype=np.int64) * 1_000_000,
               "cpu": np.zeros(n, np.int32), "tid": np.ones(n, np.int32), "ip": ip,
               "instructions": (np.arange(1, n + 1, dtype=np.int64) * step).astype(np.uint64),
               "tsc": np.arange(1, n + 1, dtype=np.uint64) * np.uint64(TSC_PER_SAMPLE),
               "mperf": mperf, "aperf": aperf}
    if vcore_mv is not None:
        columns["vcore_mv"] = np.round(np.repeat(vcore_mv, SAMPLES)
                                       + rng.normal(0, 6, n)).astype(np.uint64)
    return SampleBatch({k: v for k, v in columns.items() if k not in drop})


def phases(batch: SampleBatch, detector: str = "vpf-ip", model_key: str | None = None) -> np.ndarray:
    meta = synthetic.eight_phase_metadata(INTERVAL)
    if model_key:       # the model's own voltage range and voltage source
        meta["cpu"]["model_key"] = model_key
        del meta["histograms"]["voltage_mv"]
    meta["signals"] = {name: "synthetic" for name in batch.columns}
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector=detector))
    pipeline = Pipeline.for_trace(meta, params)
    return np.concatenate([pipeline.feed(batch).phase, pipeline.flush().phase])


def truth(*stretches: tuple[str, int]) -> list[str]:
    return [name for name, n in stretches for _ in range(n)]


def test_a_phase_that_waits_is_told_from_one_that_computes_in_the_same_code():
    labels = truth(("computes", 30), ("waits", 30), ("computes", 30))
    busy = [1.0 if name == "computes" else 0.55 for name in labels]
    got = phases(trace(busy, [1.0] * len(busy)))
    assert adjusted_rand_index(labels[:len(got)], got) > 0.9
    code_alone = phases(trace(busy, [1.0] * len(busy), drop=("tsc",)))
    assert len(np.unique(code_alone)) == 1


def test_the_clock_tells_phases_apart_where_there_is_no_pperf():
    """An AMD host: APERF/MPERF, no PPERF and no voltage register."""
    labels = truth(("full", 30), ("throttled", 30), ("full", 30))
    clock = [1.0 if name == "full" else 0.6 for name in labels]
    got = phases(trace([1.0] * len(labels), clock))
    assert adjusted_rand_index(labels[:len(got)], got) > 0.9
    assert len(np.unique(phases(trace([1.0] * len(labels), clock, drop=("aperf",))))) == 1


def test_a_clock_and_busy_share_that_stay_put_change_nothing():
    steady = trace([1.0] * 90, [1.0] * 90, seed=8)
    without = SampleBatch({k: v for k, v in steady.columns.items()
                           if k not in ("aperf", "mperf", "tsc")})
    assert np.array_equal(phases(steady), phases(without))
    assert len(np.unique(phases(steady))) == 1


def test_hwmon_voltage_tells_phases_apart_on_amd_zen():
    """No PPERF and no voltage register: k10temp's Vcore is the voltage."""
    labels = truth(("low", 30), ("high", 30), ("low", 30))
    volts = [1000.0 if name == "low" else 1250.0 for name in labels]
    batch = trace([1.0] * len(labels), [1.0] * len(labels), vcore_mv=volts, drop=("ip",))
    got = phases(batch, detector="vpf", model_key="amd-zen")
    assert adjusted_rand_index(labels[:len(got)], got) > 0.9


def test_the_report_draws_the_busy_share_that_varies_and_not_the_clock_that_does_not():
    labels = truth(("computes", 30), ("waits", 30), ("computes", 30))
    batch = trace([1.0 if name == "computes" else 0.55 for name in labels], [1.0] * len(labels))
    meta = synthetic.eight_phase_metadata(INTERVAL)
    meta["signals"] = {name: "synthetic" for name in batch.columns}
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector="vpf-ip"))
    pipeline = Pipeline.for_trace(meta, params)
    recorder = FigureRecorder.of(pipeline)
    recorder.add(pipeline.feed(batch))
    iv = recorder.intervals()
    figure = recorder.figure(iv.phase, iv.distance, iv.new_phase)
    assert [h.segment for h in figure.heatmaps] == ["ip", "c0"]
