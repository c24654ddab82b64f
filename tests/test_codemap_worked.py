"""The code signature's entries worked by hand from core/codemap.py's rules:
an object's key is the CRC-32 and Adler-32 of its file's name (the path
without its folders), an IP's entry is
SplitMix64(key ^ SplitMix64(offset >> bits)) mod entries, the offset being
the file offset for a file, the address for an IP in no mapping (the whole
address space as one object).  Mappings of a process, mappings of none,
mappings without an offset, empty mappings."""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest
from splitmix import plain_mix

from phasewatch.core.codemap import CodeMap

BITS, ENTRIES = 6, 1024


def key(name: str) -> int:
    raw = name.encode()
    return (zlib.crc32(raw) << 32) | zlib.adler32(raw)


def entry(name: str, offset: int, bits: int = BITS) -> int:
    return plain_mix(key(name) ^ plain_mix(offset >> bits)) % ENTRIES


def unmapped(ip: int, bits: int = BITS) -> int:
    return entry("[address space]", ip, bits)


def entries(mappings, ips, pids=None, bits: int = BITS) -> list[int]:
    ips = np.array(ips, np.uint64)
    out = np.empty(len(ips), np.int32)
    CodeMap.from_mappings(mappings).bins(ips, np.zeros(len(ips), np.int64), bits, ENTRIES, out,
                                         pids=None if pids is None else np.array(pids))
    return out.tolist()


def test_a_process_falls_back_on_the_mappings_of_no_process_only():
    """pid 7 has no mappings of its own: it looks in those recorded without a
    process (/a), never in pid 5's (/b); its IP in /b's range is unmapped."""
    maps = [{"start": 0x1000, "end": 0x2000, "offset": 0, "path": "/a"},
            {"start": 0x400000, "end": 0x480000, "offset": 0, "path": "/b", "pid": 5}]
    got = entries(maps, [0x400100, 0x400100, 0x1040], pids=[7, 5, 7])
    assert got == [unmapped(0x400100), entry("b", 0x100), entry("a", 0x40)]


def test_mappings_of_no_process_serve_every_process():
    maps = [{"start": 0x400000, "end": 0x480000, "offset": 0x1000, "path": "/usr/bin/prog"}]
    got = entries(maps, [0x400040, 0x400040, 0x500000], pids=[0, 7, 7])
    assert got == [entry("prog", 0x1040)] * 2 + [unmapped(0x500000)]


def test_a_mapping_without_an_offset_starts_at_offset_zero():
    maps = [{"start": 0x400000, "end": 0x480000, "path": "/usr/bin/prog"}]
    got = entries(maps, [0x400000, 0x40003F, 0x400040], bits=0)
    assert got == [entry("prog", o, 0) for o in (0, 0x3F, 0x40)]


def test_an_empty_mapping_is_ignored():
    maps = [{"start": 0x500000, "end": 0x500000, "offset": 0, "path": "/x"},
            {"start": 0x400000, "end": 0x480000, "offset": 0, "path": "/usr/bin/prog"}]
    got = entries(maps, [0x500000, 0x400080])
    assert got == [unmapped(0x500000), entry("prog", 0x80)]


def test_a_code_map_cannot_be_changed():
    code_map = CodeMap.from_mappings([{"start": 0x1000, "end": 0x2000, "path": "/a"}])
    assert code_map.starts.tolist() == [0x1000] and code_map.ends.tolist() == [0x2000]
    with pytest.raises(dataclasses.FrozenInstanceError):
        code_map.starts = np.zeros(1, np.uint64)


@pytest.mark.filterwarnings("error:divide by zero:RuntimeWarning")
def test_unknown_ips_are_user_addresses_in_no_mapping():
    maps = [{"start": 0x400000, "end": 0x480000, "offset": 0, "path": "/usr/bin/prog"}]
    ips = np.array([0x400000, 0x47FFFF, 0x480000, 0x3FFFFF, 0, 0xFFFF_FFFF_FFFF_FFFF,
                    0xFFFF_8000_0000_0000], np.uint64)
    got = CodeMap.from_mappings(maps).unknown(ips, np.zeros(len(ips), np.int64))
    assert got.tolist() == [False, False, True, True, False, False, False]
