"""``core.cpumodels``: which entry a CPU gets, against the model numbers of the
Linux kernel's arch/x86/include/asm/intel-family.h and AMD's family numbers,
and what each entry offers, against what the hardware and the docs say."""

from __future__ import annotations

import dataclasses
import glob
import re

import numpy as np
import pytest

from phasewatch.core import cpumodels
from phasewatch.core.batch import SampleBatch
from phasewatch.core.cpumodels import (AMD_PRE_ZEN, AMD_ZEN, INTEL_PRE_SKYLAKE, SKYLAKE,
                                       UNKNOWN, VIRTUAL, by_key, lookup)
from phasewatch.core.histograms import fill_reference
from phasewatch.core.params import HistogramParams, IntervalParams, Params
from phasewatch.core.pipeline import Pipeline

#: Family 6 big cores from Skylake on, as intel-family.h (Linux 6.1) numbers them.
SKYLAKE_AND_LATER = {
    "SKYLAKE_L": 0x4E, "SKYLAKE": 0x5E, "SKYLAKE_X": 0x55, "KABYLAKE_L": 0x8E,
    "KABYLAKE": 0x9E, "CANNONLAKE_L": 0x66, "ICELAKE": 0x7D, "ICELAKE_L": 0x7E,
    "ICELAKE_X": 0x6A, "ICELAKE_D": 0x6C, "COMETLAKE": 0xA5, "COMETLAKE_L": 0xA6,
    "TIGERLAKE_L": 0x8C, "TIGERLAKE": 0x8D, "ROCKETLAKE": 0xA7, "ALDERLAKE": 0x97,
    "ALDERLAKE_L": 0x9A, "RAPTORLAKE": 0xB7, "RAPTORLAKE_P": 0xBA, "RAPTORLAKE_S": 0xBF,
    "SAPPHIRERAPIDS_X": 0x8F, "METEORLAKE_L": 0xAA, "METEORLAKE": 0xAC,
    "ARROWLAKE_H": 0xC5, "ARROWLAKE": 0xC6,
}
#: Family 6 big cores before Skylake (no PPERF).
BEFORE_SKYLAKE = {
    "NEHALEM": 0x1E, "WESTMERE": 0x25, "SANDYBRIDGE": 0x2A, "IVYBRIDGE": 0x3A,
    "HASWELL": 0x3C, "HASWELL_X": 0x3F, "BROADWELL": 0x3D, "BROADWELL_X": 0x4F,
    "BROADWELL_D": 0x56,
}
#: AMD families: Zen, Zen+ and Zen 2; Zen 3 and 4; Zen 5. Before: 15h, 16h.
ZEN_FAMILIES, BEFORE_ZEN_FAMILIES = (0x17, 0x19, 0x1A), (0x10, 0x15, 0x16)


def test_the_transcribed_model_numbers_are_the_kernels():
    headers = glob.glob("/usr/src/linux-headers-*/arch/x86/include/asm/intel-family.h")
    if not headers:
        pytest.skip("no kernel headers to compare with (apt-get install linux-headers-amd64)")
    text = open(headers[0]).read()
    defined = {m[1]: int(m[2], 16)
               for m in re.finditer(r"#define INTEL_FAM6_(\w+)\s+0x([0-9A-Fa-f]+)", text)}
    for name, number in {**SKYLAKE_AND_LATER, **BEFORE_SKYLAKE}.items():
        assert defined[name] == number, name


@pytest.mark.parametrize("name", sorted(SKYLAKE_AND_LATER))
def test_skylake_and_later_get_pperf(name):
    entry = lookup("GenuineIntel", 6, SKYLAKE_AND_LATER[name])
    assert entry.key == SKYLAKE.key and entry.has_pperf and "pperf" in entry.msr_columns


def test_skylake_has_core_c_state_residency():
    """Linux's arch/x86/events/intel/cstate.c matches SKYLAKE, SKYLAKE_L and
    SKYLAKE_X to snb_cstates, whose core events are the C3, C6 and C7
    residency counters (MSR_CORE_C3/C6/C7_RESIDENCY)."""
    entry = lookup("GenuineIntel", 6, SKYLAKE_AND_LATER["SKYLAKE"])
    assert entry.has_aperf_mperf and entry.has_cstate_residency
    assert {"c3", "c6", "c7"} <= set(entry.msr_columns)


@pytest.mark.parametrize("name", sorted(BEFORE_SKYLAKE))
def test_intel_before_skylake_has_aperf_mperf_but_no_pperf(name):
    entry = lookup("GenuineIntel", 6, BEFORE_SKYLAKE[name])
    assert entry.key == INTEL_PRE_SKYLAKE.key
    assert entry.has_aperf_mperf and not entry.has_pperf and entry.has_cstate_residency
    assert entry.voltage_source == "perf_status" and not entry.virtual


def test_a_skylake_model_number_of_another_family_is_not_skylake():
    assert lookup("GenuineIntel", 15, 0x4E).key == UNKNOWN.key
    assert lookup("GenuineIntel", None, None).key == UNKNOWN.key


@pytest.mark.parametrize("family", ZEN_FAMILIES)
def test_zen_families(family):
    entry = lookup("AuthenticAMD", family, 0x01)
    assert entry.key == AMD_ZEN.key and entry.voltage_source == "hwmon"
    assert entry.hwmon_voltage == ("k10temp", "Vcore")
    assert entry.has_aperf_mperf and not entry.has_pperf and not entry.has_cstate_residency


@pytest.mark.parametrize("family", BEFORE_ZEN_FAMILIES)
def test_amd_before_zen_has_aperf_mperf_and_no_voltage(family):
    entry = lookup("AuthenticAMD", family, 0x01)
    assert entry.key == AMD_PRE_ZEN.key and entry.voltage_source == "none"
    assert entry.has_aperf_mperf and not entry.has_pperf and not entry.has_cstate_residency


def test_a_virtual_machine_offers_no_msr():
    entry = lookup("GenuineIntel", 6, 0x5E, hypervisor=True)
    assert entry.key == VIRTUAL.key and entry.virtual and entry.msr_columns == ()
    assert not (entry.has_aperf_mperf or entry.has_pperf or entry.has_cstate_residency)
    assert entry.voltage_source == "none"
    assert not any(e.virtual for e in (SKYLAKE, INTEL_PRE_SKYLAKE, AMD_ZEN, AMD_PRE_ZEN, UNKNOWN))


def test_an_unknown_cpu_assumes_the_register_but_no_counters():
    entry = lookup("CentaurHauls", 7, 0x1F)
    assert entry.key == UNKNOWN.key and entry.voltage_source == "perf_status"
    assert not (entry.has_aperf_mperf or entry.has_pperf or entry.has_cstate_residency)


def test_the_thesis_ranges():
    """docs/detectors.md: voltage 962-1080 mV on Skylake (a Xeon E3-1220 v5 at
    its 3.0 GHz base clock); a CPU the table does not know gets the same."""
    for entry in (SKYLAKE, VIRTUAL, UNKNOWN):
        assert entry.voltage_range_mv == (962.0, 1080.0) and entry.freq_max_mhz == 3000.0


def test_without_the_aperfmperf_flag_there_is_no_pperf_either():
    entry = lookup("GenuineIntel", 6, 0x5E, flags={"msr"})
    assert not entry.has_aperf_mperf and not entry.has_pperf
    assert entry.msr_columns == ("perf_status", "tsc", "c3", "c6", "c7")
    assert lookup("GenuineIntel", 6, 0x5E, flags={"aperfmperf"}).has_pperf


def test_entries_are_found_by_their_keys():
    every = (SKYLAKE, INTEL_PRE_SKYLAKE, AMD_ZEN, AMD_PRE_ZEN, VIRTUAL, UNKNOWN)
    assert len({e.key for e in every}) == len(every)
    for entry in every:
        assert by_key(entry.key) is entry
    assert by_key("no-such-model") is UNKNOWN


def test_the_table_entries_cannot_be_changed_in_place():
    with pytest.raises(dataclasses.FrozenInstanceError):
        cpumodels.SKYLAKE.has_pperf = False


@pytest.mark.parametrize("entry, volts, top_mhz", [
    (INTEL_PRE_SKYLAKE, (700.0, 1300.0), 4000.0),
    (AMD_ZEN, (700.0, 1500.0), 5000.0),
    (AMD_PRE_ZEN, (700.0, 1500.0), 4000.0),
])
def test_each_models_histograms_span_its_voltages_and_clocks(entry, volts, top_mhz):
    """Voltage in 32 equal bins over the model's range: half a millivolt
    below the first bin's top edge, lo + (hi - lo) / 32, is bin 0, half a
    millivolt above it bin 1; around the last bin's floor, hi - (hi - lo) / 32,
    bins 30 and 31.  Clocks in 64 bins from 0 to the model's top clock: half
    a MHz either side of top / 64 and of top - top / 64."""
    hp = HistogramParams.for_model(entry)
    lo, hi = volts
    w = (hi - lo) / 32
    mv = np.array([lo + w - 0.5, lo + w + 0.5, hi - w - 0.5, hi - w + 0.5])
    assert np.flatnonzero(fill_reference(mv, *hp.voltage_mv, hp.voltage_bins)).tolist() \
        == [0, 1, 30, 31]
    w = top_mhz / 64
    mhz = np.array([w - 0.5, w + 0.5, top_mhz - w - 0.5, top_mhz - w + 0.5])
    for name, bins in (("pfreq_mhz", hp.pfreq_bins), ("freq_mhz", hp.freq_bins)):
        assert bins == 64
        assert np.flatnonzero(fill_reference(mhz, *getattr(hp, name), bins)).tolist() \
            == [0, 1, 62, 63], name


def test_a_trace_that_does_not_tell_its_base_clock_is_decoded_at_3_ghz():
    """APERF and PPERF half of MPERF's step at the assumed 3 GHz base clock:
    1500 MHz, to the last bit."""
    n = 3
    batch = SampleBatch({"t_ns": np.arange(n, dtype=np.int64), "cpu": np.zeros(n, np.int32),
                         "tid": np.ones(n, np.int32),
                         "mperf": np.arange(n, dtype=np.uint64) * 2_000_000,
                         "aperf": np.arange(n, dtype=np.uint64) * 1_000_000,
                         "pperf": np.arange(n, dtype=np.uint64) * 1_000_000})
    params = Params(interval=IntervalParams(kind="samples", samples=2))
    got = Pipeline.for_trace({}, params).feed(batch)
    assert got.pfreq_mhz.tolist() == [1500.0]
