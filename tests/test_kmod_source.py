"""The kmod reader over a real file laid out as the module's rings."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from phasewatch.collectors import kmod_source as ks
from phasewatch.core.batch import MISSING, RAW_DTYPES, SampleBatch
from phasewatch.core.source import Source


def make_ring(cpu: int, nr_records: int, head: int, tail: int, lost: int = 0,
              t0: int = 1_000_000, user_every: int = 1) -> tuple[bytes, np.ndarray]:
    """A ring as the module lays it out, holding records tail..head-1; returns
    the bytes and the records in write order."""
    buf = bytearray(ks.ring_bytes(nr_records))
    header = np.frombuffer(buf, ks.HEADER_DTYPE, count=1)
    header["magic"], header["version"] = ks.RING_MAGIC, ks.ABI_VERSION
    header["record_size"], header["nr_records"], header["cpu"] = ks.RECORD_DTYPE.itemsize, nr_records, cpu
    header["head"], header["tail"], header["lost"], header["intervals"] = head, tail, lost, 7
    written = np.zeros(head - tail, ks.RECORD_DTYPE)
    seq = np.arange(tail, head, dtype=np.uint64)
    written["t_ns"] = t0 + seq * 1_000_000
    written["ip"] = 0x401000 + seq * 16
    written["tsc"] = 10 * seq
    for i, name in enumerate(ks.MSRS):
        if name != "tsc":
            written[name] = seq * 100 + i
    written["instructions"] = seq * 1000
    written["cycles"] = seq * 2000
    written["cpu"], written["pid"], written["tid"] = cpu, 42, 43 + cpu
    written["flags"] = np.where(seq % user_every == 0, ks.REC_USER | ks.REC_TARGET, ks.REC_TARGET)
    records = np.frombuffer(buf, ks.RECORD_DTYPE, count=nr_records, offset=ks.HEADER_BYTES)
    records[(seq % nr_records).astype(np.int64)] = written
    return bytes(buf), written


@pytest.fixture
def ring_file(tmp_path):
    # CPU 0: 8 slots, 8 unread records wrapped around the end, 3 lost.
    # CPU 2: 4 slots, 2 unread records, interleaved in time with CPU 0.
    ring0, w0 = make_ring(cpu=0, nr_records=8, head=13, tail=5, lost=3, user_every=3)
    ring2, w2 = make_ring(cpu=2, nr_records=4, head=2, tail=0, t0=7_500_000)
    path = tmp_path / "rings"
    path.write_bytes(ring0 + ring2)
    return path, w0, w2


def test_file_source_satisfies_source_protocol(ring_file):
    src = ks.KmodSource(str(ring_file[0]))
    try:
        assert isinstance(src, Source)
        assert src.metadata["kmod"]["cpus"] == [0, 2]
        assert src.metadata["kmod"]["ring_records"] == [8, 4]
    finally:
        src.close()


def test_reads_wrapped_rings_into_one_time_ordered_batch(ring_file):
    path, w0, w2 = ring_file
    batch = ks.read_ring_file(str(path))
    assert isinstance(batch, SampleBatch)
    assert len(batch) == len(w0) + len(w2) == 10
    expected = np.concatenate([w0, w2])
    expected = expected[np.argsort(expected["t_ns"], kind="stable")]
    np.testing.assert_array_equal(batch["t_ns"], expected["t_ns"].astype(np.int64))
    np.testing.assert_array_equal(batch["cpu"], expected["cpu"])
    np.testing.assert_array_equal(batch["tid"], expected["tid"])
    for name in ks.MSRS + ("instructions", "cycles"):
        np.testing.assert_array_equal(batch[name], expected[name], err_msg=name)
    assert np.all(np.diff(batch["t_ns"]) >= 0)


def test_columns_follow_the_batch_contract(ring_file):
    batch = ks.read_ring_file(str(ring_file[0]))
    for name in batch.signals:
        assert batch[name].dtype == RAW_DTYPES[name], name
    assert set(batch.signals) == {"t_ns", "cpu", "tid", "ip", *ks.MSRS, "instructions", "cycles"}


def test_ip_is_missing_unless_sampled_in_user_mode(ring_file):
    path, w0, _ = ring_file
    batch = ks.read_ring_file(str(path))
    cpu0 = batch["cpu"] == 0
    user = (w0["flags"] & ks.REC_USER) != 0
    assert 0 < user.sum() < len(w0)
    np.testing.assert_array_equal(batch["ip"][cpu0][user], w0["ip"][user])
    assert np.all(batch["ip"][cpu0][~user] == MISSING)


def test_counts_lost_records_from_the_ring_headers(ring_file):
    src = ks.KmodSource(str(ring_file[0]))
    try:
        list(src.batches())
        stats = src.stats()
    finally:
        src.close()
    assert stats["lost"] == 3
    assert stats["records"] == 13 + 2
    assert stats["intervals"] == 14
    assert src.stats() == stats


def test_records_overrun_by_the_writer_count_as_lost(tmp_path):
    ring, written = make_ring(cpu=1, nr_records=4, head=4, tail=0)
    path = tmp_path / "ring"
    path.write_bytes(ring)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        r = ks.Ring(m)
        # Pretend six more records were written while the reader slept: the
        # reader keeps the newest nr_records and counts the rest.
        r.tail -= 6
        taken = r.take()
        assert len(taken) == 4 and r.overrun == 6 and r.lost == 6
        del taken, r
        m.close()


def test_take_is_one_copy_per_span_not_a_view(ring_file):
    path = ring_file[0]
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        r = ks.Ring(m)
        taken = r.take()
        assert taken.base is None or not np.shares_memory(taken, r.records)
        assert r.tail == 13 and len(r.take()) == 0
        del taken, r
        m.close()


def test_rejects_a_file_that_is_not_a_ring(tmp_path):
    path = tmp_path / "junk"
    path.write_bytes(b"\0" * 8192)
    with pytest.raises(ks.KmodError):
        ks.KmodSource(str(path))


def test_msr_names_outside_the_allowlist_are_refused():
    assert ks.msr_mask(["aperf", "mperf"]) == 0b110
    with pytest.raises(ValueError):
        ks.msr_mask(["ia32_misc_enable"])


def test_close_sends_stop_to_the_device(ring_file, monkeypatch):
    """close() ends sampling itself instead of leaving it to garbage collection.
    No device can be loaded here, so the ioctls on a configured source are recorded."""
    path, _, _ = ring_file
    src = ks.KmodSource(str(path))
    src._config = np.zeros(1, ks.CONFIG_DTYPE)[0]      # as after PW_IOC_CONFIGURE
    calls = []
    monkeypatch.setattr(ks.fcntl, "ioctl", lambda fd, cmd, *args: calls.append(cmd))
    src.close()
    assert ks.IOC_STOP in calls
    src.close()
    assert calls.count(ks.IOC_STOP) == 1


def test_ioctl_magic_is_not_nsfs():
    """0xB7 belongs to nsfs (NS_GET_PARENT reached the driver before)."""
    assert {cmd >> 8 & 0xFF for cmd in (ks.IOC_CONFIGURE, ks.IOC_START, ks.IOC_STOP,
                                        ks.IOC_STATS, ks.IOC_CONSUME)} == {0xBD}
