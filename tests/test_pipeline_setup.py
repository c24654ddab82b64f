"""The pipeline's parts that need no run over a trace: what it reads, how
it is built from a recording's metadata, and the interval columns' helpers,
on worked values."""

import numpy as np
import pytest

from phasewatch.core.batch import SampleBatch, concat
from phasewatch.core.params import DetectorParams, HistogramParams, IntervalParams, Params
from phasewatch.core.pipeline import Intervals, Pipeline
from phasewatch.formats import synthetic


def params(detector="vpf"):
    return Params(interval=IntervalParams(), histograms=HistogramParams(),
                  detector=DetectorParams(detector=detector))


@pytest.mark.parametrize("model, recorded, from_perf_status", [
    ("intel-skylake+", None, True),         # the model's source
    ("amd-zen", None, False),
    ("intel-skylake+", "hwmon", False),     # the recording's source wins
    ("amd-zen", "perf_status", True),
])
def test_the_voltage_is_read_from_the_recorded_source_else_the_models(model, recorded,
                                                                     from_perf_status):
    meta = {"cpu": {"model_key": model}, "base_freq_mhz": 2000.0}
    if recorded:
        meta["voltage_source"] = recorded
    pipe = Pipeline.for_trace(meta, params())
    assert pipe.voltage_from_perf_status is from_perf_status
    read, unread = ("perf_status", "vcore_mv") if from_perf_status else ("vcore_mv", "perf_status")
    assert read in pipe.columns and unread not in pipe.columns


def test_the_ips_are_read_only_where_the_profile_has_code():
    assert {"ip", "pid"} <= Pipeline(params("vpf-ip"), synthetic.BASE_MHZ).columns
    assert not {"ip", "pid"} & Pipeline(params("vpf"), synthetic.BASE_MHZ).columns


def test_the_guessed_text_range_spans_the_user_ips_only():
    p = params("vpf-ip-fold")
    p = Params(p.interval, HistogramParams(ip_signature="fold"), p.detector)
    pipe = Pipeline(p, synthetic.BASE_MHZ)
    first = concat(list(synthetic.generate())).slice(0, 6)
    columns = dict(first.columns)
    columns["ip"] = np.array([0, 0x401000, 0xFFFF_FFFF_8100_0000, 0x402FFF,
                              0xFFFF_8000_0000_0000, 0x400800], np.uint64)   # kernel from there
    pipe.feed(SampleBatch(columns))
    assert pipe.text_range == (0x400800, 0x403000)


def test_without_a_recorded_base_frequency_the_fallback_is_taken_in_mhz():
    from phasewatch.core.cpumodels import FALLBACK_BASE_HZ
    assert Pipeline.for_trace({}, params()).base_mhz * 1e6 == pytest.approx(FALLBACK_BASE_HZ)
    assert Pipeline.for_trace({"base_freq_mhz": 2100.0}, params()).base_mhz == 2100.0


def columns_of(phase, instructions, cycles, **extra) -> Intervals:
    n = len(phase)
    z = np.zeros(n, np.int64)
    return Intervals(np.arange(n), z, z, np.asarray(instructions, np.int64),
                     np.asarray(cycles, np.int64), z, np.zeros(n), np.asarray(phase, np.int64),
                     np.zeros(n, bool), np.zeros(n), np.zeros(n), **extra)


def test_interval_helpers_on_worked_columns():
    iv = columns_of([-1, 0, 1, 0], [100, 0, 200, 50], [150, 10, 0, 100],
                    status=np.array([2, 0, 1, 0], np.int8))
    # CPI where both were counted; 0 cycles or instructions: not counted
    assert iv.cpi[0] == 1.5 and iv.cpi[3] == 2.0
    assert np.isnan(iv.cpi[1]) and np.isnan(iv.cpi[2])
    assert iv.labelled().phase.tolist() == [0, 1, 0]
    assert iv.labelled().status.tolist() == [0, 1, 0]
    assert columns_of([0, 1], [1, 1], [1, 1]).statuses.tolist() == [0, 0]
    picked = iv.rows(np.array([False, True, False, True]))
    assert picked.index.tolist() == [1, 3] and picked.status.tolist() == [0, 0]
    assert picked.profiles is None
    both = Intervals.join([iv, columns_of([3], [1], [1])])
    assert both.phase.tolist() == [-1, 0, 1, 0, 3]
    assert both.status is None                      # one part has none
    assert Intervals.join([iv, iv]).status.tolist() == [2, 0, 1, 0] * 2
    assert len(Intervals.empty()) == 0
