"""Exact counter ratios as a signal: where instructions and cycles are counted,
vpf-ip keeps an interval out of phases of another CPI; where they are not, it
behaves as before."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings, strategies as st

from phasewatch.core import reference
from phasewatch.core.batch import SampleBatch, concat
from phasewatch.core.classify import (ClassifierState, classify, classify_reference,
                                      interval_log_cpi)
from phasewatch.core.intervals import SEGMENT_KINDS as ALL_KINDS

SEGMENT_KINDS = ALL_KINDS[:3]     # voltage, pfreq, ip: the profiles these tests build
from phasewatch.core.params import (DetectorParams, IntervalParams, Params, histogram_params_of,
                                    interval_params_of)
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import synthetic
from phasewatch.formats.results import adjusted_rand_index

INTERVAL = 100_000_000
BOUNDS = np.array([0, 8, 24, 32])
#: Two phases that run the same code at the same voltage and productive
#: frequency; only their CPI differs (0.6 against 1.2: a log ratio of 0.69).
FAST = synthetic.Phase("fast", 1046.0, 3.0, 0.96, 0.02, 0.6, 0.05, (0.10, 0.20), 48.0,
                       (0.1, 0.3, 0.5, 0.7))
SLOW = replace(FAST, name="slow", cpi=1.2)
SCHEDULE = (("fast", 12), ("slow", 12), ("fast", 10), ("slow", 10))


def shared_code_trace():
    batches = synthetic.generate(SCHEDULE, INTERVAL, seed=7, phases={"fast": FAST, "slow": SLOW})
    return concat(list(batches)), synthetic.labels(SCHEDULE), synthetic.metadata(INTERVAL)


def phases_of(samples, meta, cpi_tolerance: float, interval=None, detector="vpf-ip", **kw):
    params = Params(interval=interval or interval_params_of(meta),
                    histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector=detector, cpi_tolerance=cpi_tolerance, **kw))
    return Pipeline.for_trace(meta, params).feed(samples).phase


def test_shared_code_phases_split_by_cpi_and_merge_without_it():
    samples, labels, meta = shared_code_trace()
    with_cpi = phases_of(samples, meta, 0.1)
    # each change is confirmed one interval after it is seen
    assert adjusted_rand_index(labels[:len(with_cpi)], with_cpi) > 0.9
    assert len(np.unique(with_cpi)) == 2
    code_only = phases_of(samples, meta, 0.0)
    assert len(np.unique(code_only)) == 1


def test_a_wide_tolerance_merges_them_again():
    samples, _, meta = shared_code_trace()
    # exp(1) > 2; the band fitted to the run's own spread (0.35 here) would split them
    assert len(np.unique(phases_of(samples, meta, 1.0, cpi_run_share=0.0))) == 1
    assert len(np.unique(phases_of(samples, meta, 1.0))) == 2


def test_vpf_stays_the_theses_detector():
    samples, _, meta = shared_code_trace()
    assert np.array_equal(phases_of(samples, meta, 0.1, detector="vpf"),
                          phases_of(samples, meta, 0.0, detector="vpf"))


def test_without_counted_cycles_nothing_changes():
    """A source with no cycle counts (cpu-clock sampling on a VM): the same
    phases as with the ratio turned off."""
    samples, _, meta = shared_code_trace()
    no_cycles = SampleBatch({k: v for k, v in samples.columns.items() if k != "cycles"})
    by_samples = IntervalParams(kind="samples", samples=200)
    got = phases_of(no_cycles, meta, 0.1, by_samples)
    assert np.array_equal(got, phases_of(no_cycles, meta, 0.0, by_samples))
    assert np.array_equal(got, phases_of(samples, meta, 0.0, by_samples))
    assert len(np.unique(got)) == 1


def test_pipeline_matches_reference_with_the_ratio():
    samples, _, meta = shared_code_trace()
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector="vpf-ip", cpi_tolerance=0.1))
    got = Pipeline.for_trace(meta, params).feed(samples)
    phase, dist, new, _ = reference.detect(samples, params, synthetic.BASE_MHZ,
                                           mappings=meta.get("mappings"))
    assert len(np.unique(phase)) == 2
    assert np.array_equal(got.phase, phase)
    assert np.allclose(got.distance, dist, equal_nan=True)


def test_log_cpi_is_unknown_where_a_count_is_zero():
    got = interval_log_cpi(np.array([100, 0, 100]), np.array([200, 50, 0]))
    assert got[0] == np.log(2.0) and np.isnan(got[1:]).all()


@settings(max_examples=60)
@given(st.integers(0, 2**32 - 1), st.integers(1, 200), st.floats(0.0, 0.5),
       st.booleans(), st.sampled_from([2, 3, 256]))
def test_kernel_matches_reference_with_cpi(seed, n, tolerance, adaptive, max_phases):
    rng = np.random.default_rng(seed)
    base = rng.dirichlet(np.ones(32), size=3)
    pick = rng.integers(0, 3, n)
    prof = np.abs(base[pick] + rng.normal(0, 0.05 / 32, (n, 32)))
    counts = rng.integers(0, 40, (n, 3))
    for s in range(3):
        seg = prof[:, BOUNDS[s]:BOUNDS[s + 1]]
        seg /= seg.sum(axis=1, keepdims=True)
        seg[counts[:, s] == 0] = 0.0
    # CPI in a few levels, some unknown; levels well apart from every tolerance
    log_cpi = rng.choice([-0.7, 0.0, 0.9], n) + rng.normal(0, 0.01, n)
    log_cpi[rng.random(n) < 0.2] = np.nan
    params = DetectorParams(threshold=0.3, adaptive=adaptive, max_phases=max_phases,
                            probation=bool(seed % 2))
    used = np.array([True, True, True])
    state = ClassifierState(32, 3, params, capacity=2)
    phase, dist, new, status = classify(prof, counts, BOUNDS, SEGMENT_KINDS, used, state,
                                        log_cpi, tolerance)
    r_phase, r_dist, r_new, r_status = classify_reference(prof, counts, BOUNDS, SEGMENT_KINDS,
                                                          used, params, log_cpi, tolerance)
    assert np.array_equal(status, r_status)
    assert np.array_equal(phase, r_phase)
    assert np.array_equal(new, r_new)
    assert np.allclose(dist, r_dist, equal_nan=True, atol=1e-9)
    assert np.nanmax(dist, initial=0.0) <= 1.0


def test_the_daemon_takes_the_tolerance_from_its_config(tmp_path):
    import pytest

    from phasewatch.daemon import config as daemon_config
    from phasewatch.errors import UserError

    path = tmp_path / "phasewatch.toml"
    path.write_text("[detector]\nname = \"vpf-ip\"\ncpi_tolerance = 0.2\n")
    assert daemon_config.load(str(path)).settings().detector_params().cpi_tolerance == 0.2
    path.write_text("[detector]\ncpi_tolerance = -1\n")
    with pytest.raises(UserError, match="cpi_tolerance"):
        daemon_config.load(str(path))
