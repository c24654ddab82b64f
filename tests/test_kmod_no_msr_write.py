"""The module reads MSRs and never writes one."""

from __future__ import annotations

import re
from pathlib import Path

KMOD = Path(__file__).resolve().parent.parent / "kmod"
MSR_WRITES = re.compile(r"\b(wrmsr\w*|native_write_msr\w*|write_msr\w*|__wrmsr\w*|paravirt_write_msr\w*)\b")


def kmod_sources() -> list[Path]:
    return sorted(KMOD.glob("*.c")) + sorted(KMOD.glob("*.h"))


def test_there_is_module_source_to_check():
    assert (KMOD / "phasewatch.c") in kmod_sources()


def test_no_msr_write_in_module_sources():
    hits = [f"{p.name}:{n}: {line.strip()}" for p in kmod_sources()
            for n, line in enumerate(p.read_text().splitlines(), 1) if MSR_WRITES.search(line)]
    assert hits == []


def test_msr_reads_are_the_safe_kind():
    source = (KMOD / "phasewatch.c").read_text()
    assert "rdmsr_safe(" in source
    assert not re.search(r"\brdmsrl?\s*\(", source), "plain rdmsr faults on a missing MSR"


def test_pattern_catches_writes():
    for call in ("wrmsr(0x198, lo, hi);", "wrmsrl(MSR, v);", "native_write_msr(m, l, h);",
                 "wrmsr_safe(a, b, c);", "wrmsrl_on_cpu(1, 2, 3);"):
        assert MSR_WRITES.search(call), call
