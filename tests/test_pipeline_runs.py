"""The pipeline over synthetic samples, on what its columns must hold:
interval means whatever the detector, profiles kept when asked, a replay
from the run's phases, the stats, batches of many intervals, and a held
interval across batches."""

import numpy as np
import pytest

from phasewatch.core.batch import SampleBatch, concat
from phasewatch.core.params import DetectorParams, IntervalParams
from phasewatch.core.pipeline import Intervals, Pipeline
from phasewatch.formats import synthetic
from test_pipeline import params, run


@pytest.fixture(scope="module")
def samples():
    return concat(list(synthetic.generate()))


@pytest.fixture(scope="module")
def ip_run(samples):
    """The intervals and pipeline of vpf-ip over the samples, fed whole."""
    return run(samples, params("vpf-ip"))


def test_interval_means_do_not_depend_on_the_detector_and_indices_run_on(samples, ip_run):
    # the mean voltage and productive frequency of an interval are its
    # samples' whatever the profile compares; with IPs left out (vpf) too
    vpf, ip = run(samples, params("vpf"), chunk=5000)[0], ip_run[0]
    assert np.isfinite(vpf.voltage_mv).all() and np.isfinite(vpf.pfreq_mhz).all()
    np.testing.assert_allclose(vpf.voltage_mv, ip.voltage_mv)
    np.testing.assert_allclose(vpf.pfreq_mhz, ip.pfreq_mhz)
    # fed in pieces, the intervals are numbered on from one piece to the next
    assert vpf.index.tolist() == list(range(len(vpf)))


def test_profiles_are_kept_only_when_asked_and_outlive_the_next_batch(samples, ip_run):
    assert ip_run[0].profiles is None and ip_run[0].segment_samples is None
    p, some = params("vpf-ip"), samples.slice(0, 3000)
    pipe = Pipeline(p, synthetic.BASE_MHZ)
    pipe.keep_profiles()
    whole = pipe.feed(some)
    pipe = Pipeline(p, synthetic.BASE_MHZ)
    pipe.keep_profiles()
    parts = Intervals.join([pipe.feed(some.slice(0, 1500)), pipe.feed(some.slice(1500, 3000))])
    assert whole.profiles.shape[0] == len(whole) > 0
    assert whole.segment_samples.shape == (len(whole), 5)
    np.testing.assert_array_equal(parts.profiles, whole.profiles[:len(parts)])


def test_a_replay_starts_from_the_phases_the_run_started_from(samples, ip_run):
    p = params("vpf-ip")
    pipe = ip_run[1]
    known = pipe.known_phases()
    assert known["profile"] == pipe.profile and known["profile"].startswith("vpf-ip:")
    assert known["next_id"] == pipe.n_phases == len(known["phases"]) > 1
    # ids shifted by 100: a pipeline started from them gives the shifted ids
    shifted = dict(known, next_id=known["next_id"] + 100,
                   phases=[dict(k, id=k["id"] + 100) for k in known["phases"]])
    again = Pipeline(p, synthetic.BASE_MHZ)
    again.start_from(shifted)
    assert set(again.feed(samples).phase.tolist()) <= {k["id"] for k in shifted["phases"]}
    # phases of another profile are left out
    other = Pipeline(params("vpf"), synthetic.BASE_MHZ)
    other.start_from(shifted)
    assert other.known_phases()["phases"] == [] and other.known_phases()["next_id"] == 0


def test_stats_tell_the_detector_interval_and_samples(samples, ip_run):
    s = ip_run[1].stats()
    assert (s.detector, s.adaptive, s.samples) == ("vpf-ip", False, len(samples))
    assert s.interval == "every 100,000,000 instructions"
    assert s.threshold == ip_run[1].threshold == DetectorParams().threshold


def test_a_batch_of_more_intervals_than_the_scratch_holds(samples):
    # every 10 samples an interval: 755 in one batch, beyond the 256 made room for first
    got, _ = run(samples, params("vpf", interval=IntervalParams(kind="samples", samples=10)))
    n = len(samples) // 10
    assert len(got) == n > 256
    assert (got.samples == 10).all()
    assert got.t_end_ns.tolist() == samples["t_ns"][9::10][:n].tolist()
    assert got.index.tolist() == list(range(n))


def test_an_interval_held_across_batches_and_not_confirmed_keeps_its_label():
    # one interval of "memory" amid compute-a: a candidate the next interval
    # does not confirm; fed a sample at a time, it waits in one batch for the next
    blip = concat(list(synthetic.generate((("compute-a", 6), ("memory", 1), ("compute-a", 4)))))
    p = params("vpf-ip")
    whole, _ = run(blip, p)
    pieces, _ = run(blip, p, chunk=1)
    assert len(whole) == 11 and (whole.phase >= 0).all()
    assert pieces.phase.tolist() == whole.phase.tolist()
    assert pieces.new_phase.tolist() == whole.new_phase.tolist()
    # fed in two, the first ending with the blip: six intervals, then it waits
    cut = int(np.searchsorted(blip["t_ns"], whole.t_end_ns[6], side="right"))
    pipe = Pipeline(p, synthetic.BASE_MHZ)
    first = pipe.feed(blip.slice(0, cut))
    assert first.index.tolist() == list(range(6))
    rest = Intervals.join([pipe.feed(blip.slice(cut, len(blip))), pipe.flush()])
    assert Intervals.join([first, rest]).phase.tolist() == whole.phase.tolist()


def test_an_interval_across_batches_keeps_each_segments_sample_count(samples):
    # without a TSC the busy share is unknown and the clock known: their
    # segments count different samples, carried apart into the next batch
    some = SampleBatch({k: v for k, v in samples.slice(0, 3000).columns.items() if k != "tsc"})
    p = params("vpf-ip")
    profiles = []
    for cuts in ((0, 3000), (0, 1550, 3000)):
        pipe = Pipeline(p, synthetic.BASE_MHZ)
        pipe.keep_profiles()
        got = Intervals.join([pipe.feed(some.slice(a, b)) for a, b in zip(cuts, cuts[1:])])
        profiles.append(got.profiles)
        assert (got.segment_samples[:, 3] > 0).all() and (got.segment_samples[:, 4] == 0).all()
    np.testing.assert_array_equal(profiles[0], profiles[1])
