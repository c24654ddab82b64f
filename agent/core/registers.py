"""The model-specific registers phasewatch samples, and the layout of the
fields it decodes from them: defined here once, for the collectors that read
them and the decoder that turns them into units.  Intel SDM vol. 4; 0x10,
0xE7 and 0xE8 exist on AMD too."""

from __future__ import annotations

import numpy as np

#: batch column -> MSR address
REGISTERS = {
    "perf_status": 0x198,   # IA32_PERF_STATUS
    "mperf": 0xE7,          # IA32_MPERF
    "aperf": 0xE8,          # IA32_APERF
    "pperf": 0x64E,         # MSR_PPERF, Skylake and later
    "tsc": 0x10,            # IA32_TIME_STAMP_COUNTER
    "c3": 0x3FC,            # MSR_CORE_C3_RESIDENCY
    "c6": 0x3FD,            # MSR_CORE_C6_RESIDENCY
    "c7": 0x3FE,            # MSR_CORE_C7_RESIDENCY
}
ALL_COLUMNS = tuple(REGISTERS)

#: IA32_PERF_STATUS bits 47:32 hold the core voltage in units of 1/8192 V.
VOLTAGE_SHIFT, VOLTAGE_MASK, VOLTAGE_UNITS_PER_VOLT = 32, 0xFFFF, 8192


def voltage_volts(perf_status):
    """Core voltage from IA32_PERF_STATUS, in volts."""
    raw = (np.asarray(perf_status, np.uint64) >> np.uint64(VOLTAGE_SHIFT)) & np.uint64(VOLTAGE_MASK)
    return raw / VOLTAGE_UNITS_PER_VOLT


def perf_status_of(volts, low_bits=0):
    """IA32_PERF_STATUS values that hold ``volts`` (the inverse, for made-up samples)."""
    raw = np.round(np.asarray(volts) * VOLTAGE_UNITS_PER_VOLT).astype(np.uint64)
    return (raw << np.uint64(VOLTAGE_SHIFT)) | np.uint64(low_bits)
