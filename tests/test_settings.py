"""The detection settings, the detectors' registry and the parameters, each
checked against values worked out by hand: the bounds and their messages,
the merge of given, recorded and default settings, which detector the
signals allow, and the parameters' metadata read back."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from phasewatch.core import detectors
from phasewatch.core.cpumodels import UNKNOWN
from phasewatch.core.params import (HistogramParams, IntervalParams, Params, histogram_params_of,
                                    histograms_dict, interval_dict, interval_params_of)
from phasewatch.core.settings import (LIMITS, DetectionSettings, Limit, best_detector,
                                      choose_detector, detector_label, interval_of)
from phasewatch.errors import UserError

VOLTAGE = ("t_ns", "cpu", "tid", "perf_status", "instructions")
IP_ONLY = ("t_ns", "cpu", "tid", "ip")


@pytest.mark.parametrize("name, value, problem", [
    ("threshold", 0.0, "0.0 is outside (0, 1]"),
    ("threshold", 1e-9, None),
    ("threshold", 1.0, None),
    ("threshold", 1.0000001, "1.0000001 is outside (0, 1]"),
    ("threshold", -0.5, "-0.5 is outside (0, 1]"),
    ("threshold", 1, None),
    ("threshold", True, "True is not a number"),
    ("threshold", "0.3", "'0.3' is not a number"),
    ("threshold", math.nan, "nan is not a finite number"),
    ("threshold", math.inf, "inf is not a finite number"),
    ("cpi_tolerance", 0.0, None),
    ("cpi_tolerance", 10.0, None),
    ("cpi_tolerance", 10.5, "10.5 is outside [0, 10]"),
    ("max_phases", 2, None),
    ("max_phases", 1, "1 is outside [2, 100000]"),
    ("max_phases", 100_000, None),
    ("max_phases", 100_001, "100001 is outside [2, 100000]"),
    ("max_phases", 2.0, "2.0 is not an integer"),
    ("interval_instructions", 1, None),
    ("interval_instructions", 0, "0 is outside [1, 1000000000000000]"),
    ("interval_instructions", 10**15, None),
    ("interval_instructions", 10**15 + 1, "1000000000000001 is outside [1, 1000000000000000]"),
    ("interval_ms", 0.01, None),
    ("interval_ms", 0.009, "0.009 is outside [0.01, 8.64e+07]"),
])
def test_each_bound_is_kept_and_said(name, value, problem):
    assert LIMITS[name].problem(value) == problem


def test_the_advice_names_the_range_in_plain_numbers():
    assert LIMITS["threshold"].advice() == "give a distance in (0, 1]"
    assert LIMITS["max_phases"].advice(" phases") == "give a number from 2 to 100,000 phases"
    assert LIMITS["interval_ms"].advice(" ms") == "give a number from 0.01 to 86,400,000 ms"


def test_an_integer_range_is_said_in_digits_a_user_can_type():
    """--pid's range read [1, 4.1943e+06]: no pid is written so."""
    assert Limit(int, 1, 4_194_304).describe() == "[1, 4194304]"
    assert Limit(int, 0, 8191, low_open=True).problem(0) == "0 is outside (0, 8191]"
    assert Limit(float, 0.001, 1e6).describe() == "[0.001, 1e+06]"
    pid = subprocess.run([sys.executable, "-m", "phasewatch.cli", "run", "--pid", "0"],
                         capture_output=True, text=True)
    assert pid.returncode == 2 and "'0' is outside [1, 4194304]" in pid.stderr, pid.stderr


@pytest.mark.parametrize("name, value, expected", [
    ("interval_instructions", 5_000, IntervalParams(kind="instructions", instructions=5_000)),
    ("interval_ms", 2.5, IntervalParams(kind="time", ns=2_500_000)),
    ("interval_ms", 0.0105, IntervalParams(kind="time", ns=10_500)),
    ("interval_samples", 7, IntervalParams(kind="samples", samples=7)),
])
def test_an_interval_option_gives_its_interval(name, value, expected):
    assert interval_of(name, value) == expected


@pytest.mark.parametrize("given, message", [
    (dict(detector="vpff"), "unknown detector 'vpff': choose one of vpf, vpf-ip, vpf-ip-fold, bbv"),
    (dict(threshold=0.0), "threshold: 0.0 is outside (0, 1]"),
    (dict(cpi_tolerance=-1.0), "cpi tolerance: -1.0 is outside [0, 10]"),
    (dict(max_phases=1), "max phases: 1 is outside [2, 100000]"),
    (dict(adaptive="yes"), "adaptive: 'yes' is not true or false"),
])
def test_a_bad_setting_is_refused_with_its_name(given, message):
    with pytest.raises(UserError) as caught:
        DetectionSettings(**given)
    assert str(caught.value) == message


def test_every_detector_name_is_a_setting():
    for name in ("vpf", "vpf-ip", "vpf-ip-fold", "bbv"):
        assert DetectionSettings(detector=name).detector == name


def test_given_takes_the_option_then_the_recording_then_the_default():
    defaults = DetectionSettings(threshold=0.3, max_phases=10)
    recorded = {"detector": "vpf-ip", "threshold": 0.4, "cpi_tolerance": 0.2, "max_phases": 99}
    got = DetectionSettings.given({"threshold": 0.5, "adaptive": None}, recorded, defaults)
    # max_phases is not among what a recording keeps: the default's stands.
    assert got == DetectionSettings(detector="vpf-ip", threshold=0.5, adaptive=False,
                                    cpi_tolerance=0.2, interval=None, max_phases=10)
    assert DetectionSettings.given({}) == DetectionSettings()
    assert DetectionSettings.given({}, None, defaults) == defaults
    assert DetectionSettings.given({"interval_samples": 30}).interval == \
        IntervalParams(kind="samples", samples=30)


def test_given_refuses_two_interval_lengths_and_one_out_of_range():
    with pytest.raises(UserError, match=r"^interval_ms, interval_samples exclude each other"):
        DetectionSettings.given({"interval_ms": 5.0, "interval_samples": 10})
    with pytest.raises(UserError, match=r"^interval samples: 0 is outside \[1, 1000000000\]$"):
        DetectionSettings.given({"interval_samples": 0})
    assert DetectionSettings.given({"interval_ms": 5.0, "interval_samples": None}).interval \
        == IntervalParams(kind="time", ns=5_000_000)


def test_the_recording_keeps_four_settings_and_params_take_the_streams_interval():
    s = DetectionSettings(detector="vpf-ip-fold", threshold=0.25, adaptive=True,
                          cpi_tolerance=0.1, max_phases=5)
    assert s.recorded() == {"detector": "vpf-ip-fold", "threshold": 0.25, "adaptive": True,
                            "cpi_tolerance": 0.1}
    d = DetectionSettings().detector_params()
    assert (d.detector, d.threshold, d.max_phases) == ("vpf", 0.2, 256)
    meta = {"interval": {"kind": "time", "ns": 3_000_000}}
    assert DetectionSettings().params(meta).interval == IntervalParams(kind="time", ns=3_000_000)
    own = IntervalParams(kind="samples", samples=9)
    assert DetectionSettings(interval=own).params(meta).interval == own


def test_the_detector_follows_the_signals():
    said = []
    assert DetectionSettings().for_stream(IP_ONLY + ("instructions",), said.append).detector \
        == "vpf-ip"
    assert DetectionSettings().for_stream(VOLTAGE, said.append).detector == "vpf"
    # Busy share is usable, but without IPs the default stays the thesis's.
    assert best_detector(("mperf", "tsc", "instructions")) == "vpf"
    assert said == []
    assert choose_detector(None, IP_ONLY, said.append) == "vpf-ip"
    assert choose_detector("vpf", VOLTAGE, said.append) == "vpf"
    assert choose_detector("vpf-ip-fold", IP_ONLY, said.append) == "vpf-ip-fold"
    assert said == []
    fitted = DetectionSettings(detector="vpf").for_stream(IP_ONLY + ("instructions",),
                                                          said.append, fall_back=True)
    assert fitted.detector == "vpf-ip" and len(said) == 1 and "--detector vpf-ip" in said[0]
    # Neither voltage nor anything vpf-ip reads: nothing to fall back to.
    assert choose_detector("vpf", ("t_ns", "cpu"), said.append) == "vpf"


def test_a_detector_without_its_signals_is_refused():
    with pytest.raises(UserError) as caught:
        DetectionSettings(detector="vpf").for_stream(IP_ONLY, print)
    assert str(caught.value) == ("detector vpf needs perf_status or pperf+mperf, and the samples "
                                 "have none of them (try --detector vpf-ip)")
    with pytest.raises(UserError) as caught:
        detectors.check_signals("vpf-ip", ("t_ns", "cpu"))
    assert str(caught.value) == ("detector vpf-ip needs perf_status or pperf+mperf or ip or "
                                 "aperf+mperf or mperf+tsc, and the samples have none of them")
    with pytest.raises(UserError, match=r"^detector vpf needs .* none of them$"):
        detectors.check_signals("vpf", ("tsc",))
    with pytest.raises(UserError, match=r"^detector bbv reads SimPoint \.bb files"):
        detectors.check_signals("bbv", IP_ONLY)


def test_intervals_fall_back_to_samples_only_without_instruction_counts():
    said = []
    kept = DetectionSettings().for_stream(VOLTAGE, said.append)
    assert kept.interval == IntervalParams() and said == []
    fitted = DetectionSettings().for_stream(("perf_status",), said.append, rate_hz=0)
    assert fitted.interval == IntervalParams(kind="samples")
    assert "(100 ms of the program's CPU time at 0 Hz;" in said[0]
    timed = IntervalParams(kind="time", ns=1_000_000)
    assert DetectionSettings(interval=timed).for_stream(("perf_status",), said.append) \
        .interval == timed


def test_the_warning_counts_milliseconds_at_1000_hz_unless_told_the_rate():
    said = []
    DetectionSettings().for_stream(("perf_status",), said.append)
    assert "every 100 samples instead (100 ms of the program's CPU time at 1000 Hz;" in said[0]


def test_a_pipeline_falls_back_to_ip_only_when_asked():
    from phasewatch.core.settings import pipeline_for
    meta = {"interval": {"kind": "samples", "samples": 10}}
    with pytest.raises(UserError, match=r"^detector vpf needs"):
        pipeline_for(meta, DetectionSettings(detector="vpf"), IP_ONLY, print)
    said = []
    pipeline = pipeline_for(meta, DetectionSettings(detector="vpf"), IP_ONLY, said.append,
                            fall_back=True)
    assert pipeline.params.detector.detector == "vpf-ip" and len(said) == 1


def test_settings_are_one_value_that_cannot_be_changed():
    """Commands and the daemon share one settings value: none may change it."""
    from dataclasses import FrozenInstanceError
    with pytest.raises(FrozenInstanceError):
        DetectionSettings().threshold = 0.5


def test_the_limits_and_detectors_every_command_shares_cannot_be_changed():
    """One table of limits and one registry of detectors serve every command
    and the daemon's every target: none may change an entry for the rest."""
    from dataclasses import FrozenInstanceError
    with pytest.raises(FrozenInstanceError):
        LIMITS["threshold"].high = 2.0
    with pytest.raises(FrozenInstanceError):
        detectors.REGISTRY["vpf"].uses_cpi = True
    assert LIMITS["threshold"].high == 1.0 and not detectors.REGISTRY["vpf"].uses_cpi


def test_the_detector_label_says_default_only_for_vpf_ip_chosen_by_nobody():
    assert detector_label("vpf-ip", None) == "vpf-ip (the default with IP samples)"
    assert detector_label("vpf-ip", "vpf-ip") == "vpf-ip"
    assert detector_label("vpf", None) == "vpf"


@pytest.mark.parametrize("segment, signals, usable", [
    ("voltage", ("perf_status",), True),
    ("voltage", ("vcore_mv",), True),
    ("voltage", ("pperf", "mperf"), False),
    ("pfreq", ("pperf",), False),
    ("pfreq", ("pperf", "mperf", "tsc"), True),
    ("c0", ("mperf", "tsc"), True),
    ("freq", ("aperf",), False),
])
def test_a_segment_needs_all_of_one_set_of_its_signals(segment, signals, usable):
    assert detectors.segment_usable(segment, signals) is usable


def test_the_detectors_counters_masks_and_histograms():
    assert detectors.counters_for("vpf") == ("pperf", "mperf")
    assert detectors.counters_for("vpf-ip") == ("pperf", "mperf", "aperf", "tsc")
    assert detectors.counters_for("vpf-ip-fold") == ("pperf", "mperf")
    # SEGMENTS: voltage, pfreq, ip, freq, c0
    assert detectors.used_mask("vpf").tolist() == [True, True, False, False, False]
    assert detectors.used_mask("vpf-ip-fold").tolist() == [True, True, True, False, False]
    with pytest.raises(UserError, match="^unknown detector 'nope': choose one of"):
        detectors.used_mask("nope")
    assert detectors.USES_CPI == {"vpf-ip"}
    assert detectors.usable_segments("vpf-ip", ("ip", "mperf", "tsc")) == ["ip", "c0"]
    hp = HistogramParams()
    fold = detectors.histograms_for("vpf-ip-fold", hp)
    assert (fold.ip_signature, fold.value_noise, fold.ip_entries) == ("fold", False, 32)
    regions = detectors.histograms_for("vpf-ip", hp)
    assert (regions.ip_signature, regions.value_noise, regions.ip_entries) == \
        ("regions", True, 2048)


def test_an_intervals_size_and_description():
    assert IntervalParams(instructions=1_500).size == 1_500
    assert IntervalParams(kind="time", ns=7).size == 7
    assert IntervalParams(kind="samples", samples=9).size == 9
    assert IntervalParams(instructions=1_500).describe() == "every 1,500 instructions"
    assert IntervalParams(kind="samples", samples=2_000).describe() == "every 2,000 samples"
    assert IntervalParams(kind="time", ns=2_500_000).describe() == "every 2.5 ms"
    assert IntervalParams(kind="time", ns=999_999).describe() == "every 0.999999 ms"


def test_parameters_read_back_from_the_metadata_written():
    i = IntervalParams(kind="samples", instructions=3, ns=4, samples=5)
    assert interval_params_of({"interval": interval_dict(i)}) == i
    assert interval_params_of({}) == IntervalParams()
    h = HistogramParams(voltage_mv=(900.0, 1000.0), voltage_bins=8, pfreq_mhz=(1.0, 2.0),
                        pfreq_bins=9, freq_mhz=(3.0, 4.0), freq_bins=10, c0_bins=11, ip_bins=16,
                        ip_fold_groups=3, text_range=(4096, 8192), code_bins=64,
                        code_region_bits=12, code_line_bits=5)
    assert histogram_params_of({"histograms": histograms_dict(h)}) == h
    assert histogram_params_of({"text_range": [1, 2]}).text_range == (1, 2)
    unknown = histogram_params_of({})
    assert unknown.voltage_mv == UNKNOWN.voltage_range_mv and unknown.text_range is None
    assert unknown.pfreq_mhz == (0.0, UNKNOWN.freq_max_mhz) == unknown.freq_mhz
    for_model = HistogramParams.for_model(UNKNOWN, text_range=(5, 6))
    assert for_model == HistogramParams(voltage_mv=UNKNOWN.voltage_range_mv,
                                        pfreq_mhz=(0.0, UNKNOWN.freq_max_mhz),
                                        freq_mhz=(0.0, UNKNOWN.freq_max_mhz), text_range=(5, 6))


def test_the_default_histograms_are_the_unknown_cpus_and_read_back_from_no_metadata():
    """Without a CPU model or recorded histograms, a stream is profiled over
    the thesis's ranges, which are the unknown CPU's."""
    assert HistogramParams() == HistogramParams.for_model(UNKNOWN)
    assert histogram_params_of({}) == HistogramParams()
    assert histogram_params_of({"histograms": {}}) == HistogramParams()


def test_the_default_profile_is_the_one_docs_detectors_md_describes():
    """The figures docs/detectors.md gives, read from it, against the defaults."""
    from pathlib import Path
    text = " ".join((Path(__file__).parents[1] / "docs" / "detectors.md").read_text().split())
    for phrase in ("(default 100,000,000)", "(100M retired instructions by default)",
                   "core voltage (32 bins,", "productive frequency (64 bins,",
                   "1024 entries at each of two resolutions", "ΔAPERF/ΔMPERF, 64 bins",
                   "ΔMPERF/ΔTSC, 20 bins", "16 KiB regions and 64-byte cache lines"):
        assert phrase in text
    assert IntervalParams() == IntervalParams(kind="instructions", instructions=100_000_000)
    h = HistogramParams()
    assert (h.voltage_bins, h.pfreq_bins, h.freq_bins, h.c0_bins, h.code_bins) == \
        (32, 64, 64, 20, 1024)
    assert (1 << h.code_region_bits, 1 << h.code_line_bits) == (16 * 1024, 64)


def test_the_detectors_defaults_are_those_docs_detectors_md_gives():
    """The rules' figures docs/detectors.md gives, read from it, against the
    defaults: the centroid's memory, the live phases, the adaptive threshold,
    the CPI band and twins merging within the threshold itself."""
    from pathlib import Path

    from phasewatch.core.params import DetectorParams
    text = " ".join((Path(__file__).parents[1] / "docs" / "detectors.md").read_text().split())
    for phrase in ("each new member weighing at least 1/16 (`DetectorParams.memory`)",
                   "At most 256 phases are live (`DetectorParams.max_phases`)",
                   "exponentially weighted mean plus four standard deviations",
                   "kept within 0.05–0.5", "moving only after eight joins",
                   "`--cpi-tolerance` (default 0.05,",
                   "narrows to the standard deviation of the run's own log CPI",
                   "down to 0.01:",
                   "two whose centroids are within the threshold"):
        assert phrase in text, phrase
    d = DetectorParams()
    assert (d.memory, d.max_phases) == (16, 256)
    assert (d.adaptive_z, d.adaptive_min, d.adaptive_max, d.adaptive_warmup) == (4.0, 0.05, 0.5, 8)
    assert (d.cpi_tolerance, d.cpi_run_share, d.cpi_floor) == (0.05, 1.0, 0.01)
    assert d.merge_share == 1.0
    assert d.probation and not d.adaptive


def test_parameters_are_values_that_cannot_be_changed_and_can_be_keys():
    import dataclasses

    from phasewatch.core.params import DetectorParams, Params
    for value in (Params(), IntervalParams(), HistogramParams(), DetectorParams()):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.kind = "changed"
        assert {value: 1}[type(value)()] == 1



def test_the_streams_arguments_may_be_named_and_its_options_must_be():
    """``signals`` and ``warn`` by name as well as by place; the options
    after them (the default interval, falling back) only by name."""
    from phasewatch.core.settings import pipeline_for
    said = []
    fitted = DetectionSettings().for_stream(signals=VOLTAGE, warn=said.append)
    assert fitted.detector == "vpf" and said == []
    with pytest.raises(TypeError):
        DetectionSettings().for_stream(VOLTAGE, said.append, IntervalParams(kind="samples"))
    meta = {"interval": {"kind": "samples", "samples": 10}}
    pipeline = pipeline_for(meta=meta, settings=DetectionSettings(), signals=VOLTAGE,
                            warn=said.append)
    assert pipeline.params.interval == IntervalParams(kind="samples", samples=10)
    with pytest.raises(TypeError):
        pipeline_for(meta, DetectionSettings(detector="vpf"), IP_ONLY, said.append, True)


def test_a_recording_in_time_mode_without_a_length_ends_intervals_every_100_ms():
    """IntervalParams: in time mode an interval ends at the first sample at or
    past the next multiple of the length from the first sample; 100 ms when
    the metadata gives none.  Samples 1 ns either side of 100 ms: the one at
    100 ms ends the first, the one at 200 ms the second."""
    from phasewatch.core.reference import interval_ends
    interval = interval_params_of({"interval": {"kind": "time"}})
    t = np.array([0, 99_999_999, 100_000_000, 100_000_001, 199_999_999, 200_000_000], np.int64)
    ends = interval_ends(t, np.zeros(len(t)), Params(interval=interval))
    assert ends.tolist() == [2, 5]
    assert interval.describe() == "every 100 ms"
