"""The pipeline's own arithmetic on samples worked by hand: each interval's
mean voltage and frequency, batches longer than its chunk, the text range it
guesses, the phases it starts from, the columns it reads."""

from __future__ import annotations

import numpy as np
import pytest

from phasewatch.core.batch import SampleBatch, concat
from phasewatch.core.params import DetectorParams, HistogramParams, IntervalParams, Params
from phasewatch.core.pipeline import CHUNK_ROWS, Intervals, Pipeline
from phasewatch.formats import synthetic

BASE_MHZ = 3000.0


def by_samples(n: int, detector: str = "vpf") -> Params:
    return Params(interval=IntervalParams(kind="samples", samples=n),
                  histograms=HistogramParams(), detector=DetectorParams(detector=detector))


def hand_batch() -> SampleBatch:
    """Eight samples of one CPU, 1 ms apart, 3 GHz of MPERF a millisecond.
    Voltage (hwmon) 1000, 1010, 1020, 1030 | 970, 980, 990, 1000 mV: means
    1015 and 985.  PPERF steps 2, 2, 1 | 1, 1, 1.5, 1.5 million (the first
    sample has no step): 2000, 2000, 1000 | 1000, 1000, 1500, 1500 MHz of
    3000 × PPERF / MPERF, means 5000 / 3 and 1250."""
    steps = np.array([0, 2, 2, 1, 1, 1, 1.5, 1.5]) * 1e6
    n = len(steps)
    return SampleBatch({
        "t_ns": np.arange(n, dtype=np.int64) * 1_000_000,
        "cpu": np.zeros(n, np.int32), "tid": np.full(n, 7, np.int32),
        "vcore_mv": np.array([1000, 1010, 1020, 1030, 970, 980, 990, 1000], np.uint64),
        "mperf": np.arange(n, dtype=np.uint64) * 3_000_000,
        "aperf": np.arange(n, dtype=np.uint64) * 3_000_000,
        "pperf": np.cumsum(steps).astype(np.uint64),
        "tsc": np.arange(n, dtype=np.uint64) * 3_000_000,
        "instructions": np.arange(n, dtype=np.uint64) * 1_000_000,
        "cycles": np.arange(n, dtype=np.uint64) * 2_000_000,
    })


def test_each_interval_gives_its_mean_voltage_and_productive_clock():
    got = Pipeline(by_samples(4), BASE_MHZ, voltage_from_perf_status=False).feed(hand_batch())
    assert got.voltage_mv.tolist() == [1015.0, 985.0]
    assert np.allclose(got.pfreq_mhz, [5000 / 3, 1250.0])
    assert got.samples.tolist() == [4, 4]
    # CPI from the counters' steps: 2 million cycles a million instructions
    assert got.instructions.tolist() == [3_000_000, 4_000_000]
    assert got.cpi.tolist() == [2.0, 2.0]


def test_an_interval_fed_across_batches_gives_what_it_gives_whole():
    """The accumulator's state carries into the next batch: the same eight
    samples fed as 3 + 5 rows give the same two intervals."""
    pipe = Pipeline(by_samples(4), BASE_MHZ, voltage_from_perf_status=False)
    got = Intervals.join([pipe.feed(hand_batch().slice(0, 3)), pipe.feed(hand_batch().slice(3, 8))])
    assert got.voltage_mv.tolist() == [1015.0, 985.0]
    assert np.allclose(got.pfreq_mhz, [5000 / 3, 1250.0])
    assert got.instructions.tolist() == [3_000_000, 4_000_000]
    assert got.cycles.tolist() == [6_000_000, 8_000_000]


def test_the_lowest_bin_counts_and_an_interval_of_one_sample_is_a_whole_profile():
    """962 mV is the voltage range's floor (HistogramParams: 962–1080 mV in
    32 bins): its bin is the first, and counts.  With one sample an interval,
    each profile holds that sample: one bin at 1 in the voltage segment."""
    batch = hand_batch()
    batch = SampleBatch({**{k: batch[k] for k in batch.columns},
                         "vcore_mv": np.array([962, 962, 1000, 962, 1079, 962, 962, 962],
                                              np.uint64)})
    pipe = Pipeline(by_samples(1), BASE_MHZ, voltage_from_perf_status=False)
    pipe.keep_profiles()
    got = pipe.feed(batch)
    assert got.voltage_mv.tolist()[:5] == [962.0, 962.0, 1000.0, 962.0, 1079.0]
    voltage = got.profiles[:, :32]
    assert voltage.sum(axis=1).tolist() == [1.0] * len(got)
    assert voltage[0, 0] == 1.0 and voltage[4, 31] == 1.0


def test_cpi_is_known_wherever_both_counters_moved_even_by_one():
    one = Intervals.empty()
    one.instructions, one.cycles = np.array([1, 3, 0, 5]), np.array([3, 1, 4, 0])
    assert one.cpi[:2].tolist() == [3.0, 1 / 3]
    assert np.isnan(one.cpi[2:]).all()


def test_the_trailing_partial_interval_stays_partial_joined_alone():
    pipe = Pipeline(by_samples(4), BASE_MHZ, voltage_from_perf_status=False)
    pipe.feed(hand_batch().slice(0, 6))
    tail = pipe.finish()
    assert tail.partial and tail.samples.tolist() == [2] and tail.phase.tolist() == [-1]
    assert Intervals.join([tail]).partial


def test_no_intervals_are_columns_of_length_zero():
    empty = Intervals.empty()
    assert len(empty) == 0
    for name in ("index", "t_start_ns", "t_end_ns", "instructions", "cycles", "samples",
                 "distance", "phase", "new_phase", "voltage_mv", "pfreq_mhz"):
        assert len(getattr(empty, name)) == 0, name
    assert Intervals.join([empty, empty]).phase.shape == (0,)


@pytest.fixture(scope="module")
def long_batch() -> SampleBatch:
    """More than two chunks of samples: the synthetic schedule ten times over."""
    batch = concat(list(synthetic.generate(synthetic.SCHEDULE * 10)))
    assert len(batch) > 2 * CHUNK_ROWS + 1
    return batch


def test_a_batch_longer_than_a_chunk_gives_what_its_pieces_give(long_batch):
    """A batch is worked in chunks of CHUNK_ROWS rows: every row once, in order."""
    p = by_samples(100, "vpf-ip")
    whole = Pipeline(p, synthetic.BASE_MHZ)
    got = whole.feed(long_batch)
    pieces = Pipeline(p, synthetic.BASE_MHZ)
    # pieces of 777 rows: intervals of 100 samples run across them
    want = Intervals.join([pieces.feed(long_batch.slice(a, a + 777))
                           for a in range(0, len(long_batch), 777)])
    assert whole.samples == pieces.samples == len(long_batch)
    assert not got.partial and not want.partial     # complete intervals, joined
    for name in ("index", "t_start_ns", "t_end_ns", "instructions", "samples", "phase",
                 "new_phase"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    for name in ("distance", "voltage_mv", "pfreq_mhz"):
        assert np.allclose(getattr(got, name), getattr(want, name), equal_nan=True), name


def test_a_stream_counts_every_sample_it_is_fed():
    pipe = Pipeline(by_samples(4), BASE_MHZ, voltage_from_perf_status=False)
    assert pipe.stats().samples == 0
    pipe.feed(hand_batch())
    pipe.feed(hand_batch().slice(0, 3))
    assert pipe.stats().samples == 11


def ips_batch(ips: list[int]) -> SampleBatch:
    n = len(ips)
    return SampleBatch({"t_ns": np.arange(n, dtype=np.int64) * 1_000_000,
                        "cpu": np.zeros(n, np.int32), "tid": np.ones(n, np.int32),
                        "ip": np.array(ips, np.uint64)})


def test_the_folded_signature_takes_the_first_user_addresses_as_its_text_range():
    """No user address yet (zeros, kernel addresses): no range; then one
    user address is a range of one byte, kept whatever comes later."""
    pipe = Pipeline(by_samples(4, "vpf-ip-fold"), BASE_MHZ)
    assert pipe.text_range is None
    pipe.feed(ips_batch([0, 0xFFFF_FFFF_8100_0000, 0]))
    assert pipe.text_range is None
    pipe.feed(ips_batch([0, 0x40_1000, 0xFFFF_FFFF_8100_0000]))
    assert pipe.text_range == (0x40_1000, 0x40_1001)
    pipe.feed(ips_batch([0x10_0000, 0x90_0000]))
    assert pipe.text_range == (0x40_1000, 0x40_1001)


def test_the_columns_read_are_the_ids_the_counters_and_the_voltage_source():
    vpf = Pipeline(by_samples(4, "vpf"), BASE_MHZ, voltage_from_perf_status=False)
    assert {"t_ns", "cpu", "tid", "vcore_mv", "mperf", "pperf"} <= vpf.columns
    assert "perf_status" not in vpf.columns and "ip" not in vpf.columns
    ip = Pipeline(by_samples(4, "vpf-ip"), BASE_MHZ)
    assert {"t_ns", "cpu", "tid", "perf_status", "ip", "pid"} <= ip.columns


@pytest.fixture(scope="module")
def known() -> dict:
    """The phases a run over the synthetic schedule ends with."""
    pipe = Pipeline(by_samples(100, "vpf-ip"), synthetic.BASE_MHZ)
    pipe.feed(concat(list(synthetic.generate())))
    known = pipe.known_phases()
    assert len(known["phases"]) >= 3 and known["next_id"] >= 3
    return known


def started(known: dict) -> dict:
    pipe = Pipeline(by_samples(100, "vpf-ip"), synthetic.BASE_MHZ)
    pipe.start_from(known)
    return pipe.known_phases()


def test_a_pipeline_started_from_known_phases_knows_them_and_their_next_id(known):
    again = started(known)
    assert [p["id"] for p in again["phases"]] == [p["id"] for p in known["phases"]]
    assert again["next_id"] == known["next_id"]


def test_known_phases_of_another_layout_are_left_out(known):
    """A phase is taken only where both its width and its segments fit."""
    first, second, *rest = known["phases"]
    wider = {**first, "width": first["width"] + 1}
    fewer = {**second, "members": second["members"][:-1]}
    again = started({**known, "phases": [wider, fewer, *rest]})
    assert [p["id"] for p in again["phases"]] == [p["id"] for p in rest]


def test_without_a_next_id_ids_start_at_zero(known):
    assert started({"profile": known["profile"], "phases": []})["next_id"] == 0
    assert started({**known, "profile": "vpf:1,2"})["next_id"] == 0     # not this layout


def test_an_empty_batch_completes_no_interval():
    pipe = Pipeline(by_samples(4), BASE_MHZ, voltage_from_perf_status=False)
    got = pipe.feed(hand_batch().slice(0, 0))
    assert len(got) == 0 and pipe.stats().samples == 0
    assert pipe.feed(hand_batch()).samples.tolist() == [4, 4]


def test_the_stats_of_a_summary_cannot_be_changed():
    stats = Pipeline(by_samples(4), BASE_MHZ).stats()
    with pytest.raises(AttributeError):
        stats.samples = 5
    assert stats.samples == 0


def test_a_trace_without_a_base_frequency_is_read_at_3_ghz():
    """cpumodels.FALLBACK_BASE_HZ, 3 GHz: the same PPERF steps as above give
    3000 × PPERF / MPERF, means 5000 / 3 and 1250 MHz."""
    got = Pipeline.for_trace({"voltage_source": "hwmon"}, by_samples(4)).feed(hand_batch())
    assert np.allclose(got.pfreq_mhz, [5000 / 3, 1250.0], rtol=1e-12, atol=0)
    assert got.voltage_mv.tolist() == [1015.0, 985.0]


@pytest.mark.parametrize("detector, tolerance, cpi_kept", [
    ("vpf", 0.05, False),           # the thesis's detector uses no CPI
    ("vpf-ip", 0.0, False),         # the gate off: as if the CPI were not counted
    ("vpf-ip", 0.05, True),
])
def test_phases_keep_a_cpi_only_where_the_detector_gates_on_it(detector, tolerance, cpi_kept):
    """hand_batch counts 2 million cycles a million instructions: log CPI
    log 2 in both intervals, where the phases keep one at all."""
    p = Params(interval=IntervalParams(kind="samples", samples=4),
               detector=DetectorParams(detector=detector, cpi_tolerance=tolerance))
    pipe = Pipeline(p, BASE_MHZ, voltage_from_perf_status=False)
    pipe.feed(hand_batch())
    phases = pipe.known_phases()["phases"]
    assert phases
    if cpi_kept:
        assert sum(k["cpi_n"] for k in phases) == 2
        assert all(np.isclose(k["log_cpi"], np.log(2.0)) for k in phases)
    else:
        assert all(k["cpi_n"] == 0 and k["log_cpi"] == 0.0 for k in phases)
