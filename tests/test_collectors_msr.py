"""MSR reading against sparse files standing in for /dev/cpu/N/msr.

In a file, an 8-byte value at offset A overlaps the values at A+1..A+7, so
adjacent registers (MPERF 0xE7 / APERF 0xE8, C3-C7 0x3FC-0x3FE) share bytes;
the real device has no such overlap.  Tests that need exact values for every
column read the non-adjacent ones, or compare with the file's bytes.
"""

from __future__ import annotations

import errno
import re
import os
import struct

import numpy as np
import pytest

from phasewatch.collectors import msr
from phasewatch.collectors.kernel_modules import load_hint
from phasewatch.core import registers
from phasewatch.core.batch import MISSING
from phasewatch.errors import MissingDevice, MissingPrivilege

SPARSE = ("perf_status", "aperf", "pperf", "tsc", "c7")   # no two overlap


def write_msrs(path, values: dict[str, int]) -> None:
    """Write registers by column name at offset = MSR address, lowest address first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "r+b" if path.exists() else "w+b") as f:
        f.truncate(0x1000)
        for name in sorted(values, key=registers.REGISTERS.get):
            f.seek(registers.REGISTERS[name])
            f.write(struct.pack("<Q", values[name]))


def file_value(path, name: str) -> int:
    with open(path, "rb") as f:
        f.seek(registers.REGISTERS[name])
        return struct.unpack("<Q", f.read(8))[0]


@pytest.fixture
def msrdir(tmp_path):
    return tmp_path


def template(root) -> str:
    return str(root / "cpu{cpu}" / "msr")


def test_voltage_decodes_bits_47_32():
    raw = (8192 << 32) | 0x1F00                 # 1.0 V, ratio bits set below
    assert registers.voltage_volts(raw) == pytest.approx(1.0)
    assert registers.voltage_volts(0x400000003E8) == pytest.approx(0x400 / 8192)   # QEMU's fake
    assert registers.voltage_volts((0xFFFF << 48) | (9830 << 32)) == pytest.approx(9830 / 8192)


def test_made_up_perf_status_holds_the_voltage_in_bits_47_32_and_keeps_the_low_bits():
    """perf_status_of, which synthetic samples are made with, by the register's layout."""
    volts = np.array([1.0, 0.9623, 1.2])
    got = registers.perf_status_of(volts, low_bits=0x1E00)
    assert got.tolist() == [(8192 << 32) | 0x1E00, (7883 << 32) | 0x1E00, (9830 << 32) | 0x1E00]
    assert registers.voltage_volts(got).tolist() == [1.0, 7883 / 8192, 9830 / 8192]
    assert registers.perf_status_of([1.0]).tolist() == [8192 << 32]     # no low bits set


def test_reads_values_written_at_their_addresses(msrdir):
    for cpu in (0, 1):
        write_msrs(msrdir / f"cpu{cpu}" / "msr",
                   {"perf_status": (9011 << 32), "aperf": 10**12 + cpu, "pperf": 7 * 10**11,
                    "tsc": 2**40 + cpu, "c7": 12345})
    reader = msr.MsrReader([0, 1], SPARSE, template(msrdir))
    out = np.zeros((2, len(SPARSE)), np.uint64)
    reader.read(out)
    assert out[:, 0].tolist() == [9011 << 32] * 2
    assert out[:, 1].tolist() == [10**12, 10**12 + 1]
    assert out[:, 3].tolist() == [2**40, 2**40 + 1]
    assert reader.stats() == {"errors": 0, "cpus_lost": 0}


def test_adjacent_registers_read_what_the_file_holds(msrdir):
    path = msrdir / "cpu0" / "msr"
    write_msrs(path, {"mperf": 0x1111111111111111, "aperf": 0x2222222222222222})
    reader = msr.MsrReader([0], ("mperf", "aperf"), template(msrdir))
    out = np.zeros((1, 2), np.uint64)
    reader.read(out)
    assert out[0].tolist() == [file_value(path, "mperf"), 0x2222222222222222]
    assert int(out[0, 0]) & 0xFF == 0x11


def test_device_is_opened_read_only(msrdir, monkeypatch):
    write_msrs(msrdir / "cpu0" / "msr", {"tsc": 1})
    flags = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, f, *a: flags.append(f) or real_open(p, f, *a))
    msr.MsrReader([0], ("tsc",), template(msrdir)).close()
    assert flags and all(f & (os.O_WRONLY | os.O_RDWR) == 0 for f in flags)


def test_missing_device_names_module(tmp_path):
    with pytest.raises(MissingDevice, match=rf"no .*cpu0/msr: {re.escape(load_hint('msr'))}"):
        msr.MsrReader([0], ("tsc",), template(tmp_path))


def test_unreadable_device_names_capability(tmp_path):
    """A device only root may open, opened by user nobody in a forked child
    (root opens anything; a fork needs no path that nobody can execute)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to become user nobody")
    write_msrs(tmp_path / "cpu0" / "msr", {"tsc": 1})
    tmp_path.chmod(0o755)
    (tmp_path / "cpu0").chmod(0o755)
    (tmp_path / "cpu0" / "msr").chmod(0o600)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        message = b"opened"
        try:
            os.setuid(65534)
            msr.MsrReader([0], ("tsc",), template(tmp_path))
        except MissingPrivilege as exc:
            message = f"MissingPrivilege: {exc}".encode()
        except BaseException as exc:
            message = repr(exc).encode()
        os.write(write_end, message)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        message = f.read().decode()
    os.waitpid(pid, 0)
    assert message.startswith("MissingPrivilege") and "CAP_SYS_RAWIO" in message, message


def test_eio_from_a_real_file_stores_missing_and_counts(msrdir):
    """/proc/self/mem answers EIO for unmapped addresses, and the MSR
    addresses (0x10..0x64E) are never mapped: a real EIO for every register
    of CPU 1, while CPU 0 reads normally."""
    write_msrs(msrdir / "cpu0" / "msr", {"tsc": 99, "aperf": 5})
    (msrdir / "cpu1").mkdir()
    (msrdir / "cpu1" / "msr").symlink_to("/proc/self/mem")
    reader = msr.MsrReader([0, 1], ("tsc", "aperf"), template(msrdir))
    out = np.zeros((2, 2), np.uint64)
    reader.read(out)
    assert out[0].tolist() == [99, 5]
    assert out[1].tolist() == [MISSING, MISSING]
    assert reader.read_errors == 2
    assert reader.lost_cpus == []


def test_cpu_going_offline_is_dropped_and_the_rest_read_on(msrdir):
    for cpu in (0, 1):
        write_msrs(msrdir / f"cpu{cpu}" / "msr", {"tsc": 100 + cpu})
    offline = set()

    def pread(fd, n, offset):          # the msr driver answers ENXIO for an offline CPU
        if fd in offline:
            raise OSError(errno.ENXIO, os.strerror(errno.ENXIO))
        return os.pread(fd, n, offset)

    reader = msr.MsrReader([0, 1], ("tsc",), template(msrdir), pread=pread)
    out = np.zeros((2, 1), np.uint64)
    reader.read(out)
    assert out[:, 0].tolist() == [100, 101]
    (msrdir / "cpu1" / "msr").unlink()
    offline.add(reader._fds[1])
    reader.read(out)
    assert out[:, 0].tolist() == [100, MISSING]
    assert reader.lost_cpus == [1]
    write_msrs(msrdir / "cpu0" / "msr", {"tsc": 200})
    reader.read(out)
    assert out[:, 0].tolist() == [200, MISSING]
    assert reader.stats() == {"errors": 0, "cpus_lost": 1}


def test_msr_safe_batch_layout_matches_the_header():
    # struct msr_batch_op is 32 bytes with msrdata at 16; the ioctl is _IOWR('c', 0xA2, 16 bytes)
    import ctypes
    assert ctypes.sizeof(msr._BatchOp) == 32
    assert msr._BatchOp.msrdata.offset == 16 and msr._BatchOp.err.offset == 4
    assert ctypes.sizeof(msr._BatchArray) == 16
    assert msr.X86_IOC_MSR_BATCH == 0xC01063A2


@pytest.mark.skipif(not msr.msr_safe_present(), reason="msr-safe is not installed here")
def test_msr_safe_batch_reads_tsc():
    reader = msr.MsrSafeBatchReader([0], ("tsc",))
    out = np.zeros((1, 1), np.uint64)
    reader.read(out)
    first = int(out[0, 0])
    reader.read(out)
    assert int(out[0, 0]) > first
