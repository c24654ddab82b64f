"""The function symbols of one ELF file, read from its symbol tables.

Symbol tables are read once per file (path + inode), their headers with
``formats.elf``:
``.symtab``, else the one in the separate debug file found by build id
(``/usr/lib/debug/.build-id``), else ``.dynsym``.

A run-time address ``ip`` in a mapping corresponds to the file virtual address
``ip - bias``, where, for the PT_LOAD segment that the mapping's file offset
falls in, ``bias = map_start - map_offset - (p_vaddr - p_offset)``: zero for a
non-PIE executable, the load address for PIE executables and shared objects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import numpy as np

from ..formats.elf import PT_LOAD, ElfFile
from .maps import Mapping

DEBUG_ROOT = Path("/usr/lib/debug")


@dataclass(frozen=True)
class Segment:
    """A loadable segment of an ELF file: where it is mapped from and to."""

    vaddr: int
    offset: int
    filesz: int
    executable: bool


@dataclass(frozen=True)
class ElfSymbols:
    """The function symbols and load segments of one ELF file."""

    path: str
    starts: np.ndarray  # uint64 file vaddrs, ascending
    ends: np.ndarray  # uint64, exclusive
    names: np.ndarray  # object: as in the table (C++ names mangled; see function_names)
    segments: tuple[Segment, ...]
    text: tuple[int, int] | None  # .text (lo, hi) file vaddrs
    source: str = ""  # which table the names came from
    build_id: str = ""  # hex, from the NT_GNU_BUILD_ID note; "" without one

    def lookup(self, vaddrs: np.ndarray) -> np.ndarray:
        """For each file vaddr, the index of the function containing it, or -1."""
        index = np.searchsorted(self.starts, vaddrs, side="right") - 1
        found = index >= 0
        found[found] = vaddrs[found] < self.ends[index[found]]
        return np.where(found, index, -1)

    def function_names(self, indices: np.ndarray) -> np.ndarray:
        """The names of the functions at ``indices`` (from :meth:`lookup`), as
        people read them.  Only names looked up are demangled: a C++ library
        has thousands."""
        return np.array([demangle(name) for name in self.names[indices]], dtype=object)

    def bias(self, mapping: Mapping) -> int:
        """Run-time address minus file vaddr for code in ``mapping``."""
        segment = self.segment_at(mapping.offset)
        if segment is None:
            return mapping.start - mapping.offset
        return mapping.start - mapping.offset - (segment.vaddr - segment.offset)

    def segment_at(self, file_offset: int) -> Segment | None:
        """The PT_LOAD segment a page-aligned mapping at ``file_offset`` maps,
        preferring executable segments when pages are shared."""
        matches = [s for s in self.segments
                   if _page_down(s.offset) <= file_offset < s.offset + max(s.filesz, 1)]
        matches.sort(key=lambda s: not s.executable)
        return matches[0] if matches else None


def _page_down(value: int) -> int:
    return value & ~(os.sysconf("SC_PAGE_SIZE") - 1)


def text_range(path: str | os.PathLike) -> tuple[int, int]:
    """(lo, hi) file vaddrs of the ``.text`` section of the ELF file at ``path``."""
    symbols = load_symbols(os.fspath(path))
    if symbols is None or symbols.text is None:
        raise ValueError(f"{path}: no ELF .text section")
    return symbols.text


def load_symbols(path: str, inode: int | None = None) -> ElfSymbols | None:
    """The function symbols of the ELF file at ``path``, cached by path and
    inode; None if it cannot be read as ELF."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    if inode is not None and inode != stat.st_ino:
        return None  # replaced since it was mapped: its symbols would lie
    return _load_symbols_cached(path, stat.st_ino, stat.st_mtime_ns)


@lru_cache(maxsize=256)
def _load_symbols_cached(path: str, inode: int, mtime_ns: int) -> ElfSymbols | None:
    try:
        with open(path, "rb") as stream:
            elf = ElfFile(stream)
            segments = tuple(_load_segments(elf))
            text = _section_range(elf, ".text")
            build_id = elf.build_id() or ""
            rows, source = _function_rows_of(elf, ".symtab"), ".symtab"
            if not rows:
                rows, source = _debug_file_rows(build_id), "debug file .symtab"
            if not rows:
                rows, source = _function_rows_of(elf, ".dynsym"), ".dynsym"
    except (OSError, ValueError):
        return None
    starts, ends, names = _sorted_functions(rows)
    return ElfSymbols(path, starts, ends, names, segments, text, source, build_id)


def _load_segments(elf: ElfFile) -> Iterable[Segment]:
    for segment in elf.segments():
        if segment.type == PT_LOAD:
            yield Segment(segment.vaddr, segment.offset, segment.filesz,
                          bool(segment.flags & 0x1))  # PF_X


def _section_range(elf: ElfFile, name: str) -> tuple[int, int] | None:
    section = elf.section_by_name(name)
    if section is None:
        return None
    return section.addr, section.addr + section.size


def _function_rows_of(elf: ElfFile, section_name: str) -> list:
    section = elf.section_by_name(section_name)
    return _function_rows(elf, section) if section is not None else []


def _debug_file_rows(build_id: str) -> list:
    """Function rows from the separate debug file of the file whose build id
    is ``build_id``, if installed; it has the same vaddrs as the stripped file."""
    if not build_id:
        return []
    debug_path = DEBUG_ROOT / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    try:
        with open(debug_path, "rb") as stream:
            return _function_rows_of(ElfFile(stream), ".symtab")
    except (OSError, ValueError):
        return []


#: Elf32_Sym and Elf64_Sym, little-endian (``newbyteorder`` for big-endian files)
_SYM_DTYPES = {
    32: np.dtype([("name", "<u4"), ("value", "<u4"), ("size", "<u4"), ("info", "u1"),
                  ("other", "u1"), ("shndx", "<u2")]),
    64: np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                  ("value", "<u8"), ("size", "<u8")]),
}
#: STT_FUNC.  An STT_GNU_IFUNC symbol's address is its resolver's, named by the resolver's own symbol.
_STT_FUNC = 2
#: Of symbols at one address, a GLOBAL one names it, else a WEAK one, else a LOCAL one.
_BIND_RANKS = np.array([2, 0, 1] + [3] * 13, dtype=np.int8)   # by STB_ value


def _function_rows(elf: ElfFile, table) -> list[tuple[int, int, int, str]]:
    """(start, size, binding rank, name) of the defined functions in ``table``,
    read as one array (an object per symbol took ~50 µs each, a fifth of a
    second for libc's)."""
    dtype = _SYM_DTYPES[elf.elfclass]
    if not elf.little_endian:
        dtype = dtype.newbyteorder(">")
    data = elf.data(table)
    symbols = np.frombuffer(data, dtype, count=len(data) // dtype.itemsize)
    kind = symbols["info"] & 0xF
    keep = ((kind == _STT_FUNC) & (symbols["value"] != 0)
            & (symbols["shndx"] != 0) & (symbols["name"] != 0))
    symbols = symbols[keep]
    strings = elf.data(elf.section(table.link))
    ranks = _BIND_RANKS[symbols["info"] >> 4]
    rows = zip(symbols["value"].tolist(), symbols["size"].tolist(), ranks.tolist(),
               (_string_at(strings, offset) for offset in symbols["name"].tolist()))
    return [row for row in rows if row[3]]


def _string_at(strings: bytes, offset: int) -> str:
    end = strings.find(b"\0", offset)
    return strings[offset:end if end >= 0 else len(strings)].decode("utf-8", "replace")


def _underscores(name: str) -> int:
    """Leading underscores: of aliases, ``getpid`` reads better than ``__getpid``."""
    return len(name) - len(name.lstrip("_"))


@lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """A C++ symbol as people read it (``ns::f(int)``); other names unchanged."""
    if not name.startswith("_Z"):
        return name
    import cxxfilt
    try:
        return cxxfilt.demangle(name)
    except cxxfilt.InvalidName:
        return name


def _sorted_functions(rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starts, ends and names, one per address (aliases collapse to the best
    bound, plainest, shortest name); a symbol without a size reaches to the next one."""
    rows = sorted(rows, key=lambda row: (row[0], row[2], _underscores(row[3]), len(row[3]),
                                         row[3]))
    unique = [row for i, row in enumerate(rows) if i == 0 or row[0] != rows[i - 1][0]]
    starts = np.array([row[0] for row in unique], dtype=np.uint64)
    sizes = np.array([row[1] for row in unique], dtype=np.uint64)
    names = np.array([row[3] for row in unique], dtype=object)
    next_starts = np.append(starts[1:], np.uint64(np.iinfo(np.uint64).max))
    ends = np.where(sizes > 0, starts + sizes, next_starts)
    return starts, ends, names
