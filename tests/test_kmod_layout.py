"""The Python view of the kmod ABI matches kmod/phasewatch_uapi.h, as compiled."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from phasewatch.collectors import kmod_source as ks
from phasewatch.core.registers import REGISTERS

KMOD = Path(__file__).resolve().parent.parent / "kmod"

STRUCTS = {
    "pw_record": ks.RECORD_DTYPE,
    "pw_ring_header": ks.HEADER_DTYPE,
    "pw_config": ks.CONFIG_DTYPE,
    "pw_stats": ks.STATS_DTYPE,
    "pw_consume": ks.CONSUME_DTYPE,
}
IOCTLS = {
    "PW_IOC_CONFIGURE": ks.IOC_CONFIGURE,
    "PW_IOC_START": ks.IOC_START,
    "PW_IOC_STOP": ks.IOC_STOP,
    "PW_IOC_STATS": ks.IOC_STATS,
    "PW_IOC_CONSUME": ks.IOC_CONSUME,
}
CONSTANTS = {
    "PW_ABI_VERSION": ks.ABI_VERSION,
    "PW_RING_MAGIC": ks.RING_MAGIC,
    "PW_HEADER_BYTES": ks.HEADER_BYTES,
    "PW_CPU_WORDS": ks.CPU_WORDS,
    "PW_NR_MSRS": len(ks.MSRS),
    "PW_REC_USER": ks.REC_USER,
    "PW_REC_TARGET": ks.REC_TARGET,
}


def _probe_source() -> str:
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "phasewatch_uapi.h"',
             "int main(void) {"]
    for struct, dtype in STRUCTS.items():
        lines.append(f'printf("sizeof {struct} %zu\\n", sizeof(struct {struct}));')
        for field in dtype.names:
            lines.append(f'printf("offsetof {struct}.{field} %zu\\n", '
                         f'offsetof(struct {struct}, {field}));')
            lines.append(f'printf("fieldsize {struct}.{field} %zu\\n", '
                         f'sizeof(((struct {struct} *)0)->{field}));')
    for name in list(IOCTLS) + list(CONSTANTS):
        lines.append(f'printf("value {name} %llu\\n", (unsigned long long)({name}));')
    for i, name in enumerate(ks.MSRS):
        lines.append(f'printf("value PW_MSR_{name.upper()} %d\\n", PW_MSR_{name.upper()});')
    lines.append("return 0; }")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, int]:
    if shutil.which("gcc") is None:
        pytest.fail("the layout test needs gcc (apt-get install gcc)")
    tmp = tmp_path_factory.mktemp("kmod_layout")
    (tmp / "probe.c").write_text(_probe_source())
    subprocess.run(["gcc", "-Wall", "-Werror", f"-I{KMOD}", "-o", str(tmp / "probe"),
                    str(tmp / "probe.c")], check=True)
    out = subprocess.run([str(tmp / "probe")], check=True, capture_output=True, text=True).stdout
    return {f"{kind} {name}": int(value) for kind, name, value in
            (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("struct", STRUCTS)
def test_struct_size_matches(c_layout, struct):
    assert STRUCTS[struct].itemsize == c_layout[f"sizeof {struct}"]


@pytest.mark.parametrize("struct", STRUCTS)
def test_field_offsets_and_sizes_match(c_layout, struct):
    dtype = STRUCTS[struct]
    for field in dtype.names:
        sub, offset = dtype.fields[field][:2]
        assert offset == c_layout[f"offsetof {struct}.{field}"], field
        assert sub.itemsize == c_layout[f"fieldsize {struct}.{field}"], field


@pytest.mark.parametrize("name", IOCTLS)
def test_ioctl_numbers_match(c_layout, name):
    assert IOCTLS[name] == c_layout[f"value {name}"]


@pytest.mark.parametrize("name", CONSTANTS)
def test_constants_match(c_layout, name):
    assert CONSTANTS[name] == c_layout[f"value {name}"]


def test_msr_order_matches_allowlist_enum(c_layout):
    assert [c_layout[f"value PW_MSR_{n.upper()}"] for n in ks.MSRS] == list(range(len(ks.MSRS)))


def test_msr_addresses_match_module_allowlist():
    source = (KMOD / "phasewatch.c").read_text()
    for name, addr in ((n, REGISTERS[n]) for n in ks.MSRS):
        assert f"[PW_MSR_{name.upper()}]" in source
        line = next(l for l in source.splitlines() if f"[PW_MSR_{name.upper()}]" in l)
        assert int(line.split("=")[1].strip(" ,"), 16) == addr, name
