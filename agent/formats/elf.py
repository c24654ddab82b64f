"""The few ELF header fields phasewatch reads: load segments, sections by
name, section data and the GNU build id.

Read with ``struct`` from the file's headers.  pyelftools reads the same
fields, but its import alone takes ~30 ms of CPU, more than a short
command's whole watch; it stays the tests' reference for these fields.
Errors in the file (not ELF, cut short, tables out of range) are
``ValueError``.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterator, NamedTuple

SHT_NOTE = 7
SHT_NOBITS = 8
PT_LOAD = 1
NT_GNU_BUILD_ID = 3
_SHN_XINDEX = 0xFFFF
_PN_XNUM = 0xFFFF

#: e_phoff, e_shoff, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
_HEADER = {32: "16x8x4xIIxxxxxxHHHHH", 64: "16x8x8xQQxxxxxxHHHHH"}
#: sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info
_SECTION = {32: "IIIIIIII", 64: "IIQQQQII"}
#: p_type, p_flags, p_offset, p_vaddr, p_filesz (the rest is left out)
_SEGMENT = {32: ("IIIxxxxIxxxxI", (0, 4, 1, 2, 3)), 64: ("IIQQxxxxxxxxQ", (0, 1, 2, 3, 4))}


class Section(NamedTuple):     # tuples: a frozen dataclass takes 8 times as long to define
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    info: int


class ProgramHeader(NamedTuple):
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int


class ElfFile:
    """The headers of the ELF file open in ``stream`` (binary, seekable)."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        ident = self._read(0, 16)
        if ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ValueError("not an ELF file")
        self.elfclass = 32 if ident[4] == 1 else 64
        self.little_endian = ident[5] == 1
        self._order = "<" if self.little_endian else ">"
        (self._phoff, self._shoff, self._phentsize, self._phnum, self._shentsize,
         self._shnum, self._shstrndx) = self._unpack(_HEADER[self.elfclass], 0)
        self._size = stream.seek(0, 2)
        self._sections: list[Section] | None = None

    def _read(self, offset: int, size: int) -> bytes:
        self.stream.seek(offset)
        data = self.stream.read(size)
        if len(data) != size:
            raise ValueError(f"ELF file cut short at offset {offset}")
        return data

    def _unpack(self, layout: str, offset: int) -> tuple:
        layout = self._order + layout
        return struct.unpack(layout, self._read(offset, struct.calcsize(layout)))

    def _section_header(self, index: int) -> tuple:
        return self._unpack(_SECTION[self.elfclass], self._shoff + index * self._shentsize)

    def _section_count(self) -> int:
        if self._shoff == 0:
            return 0
        count = self._shnum or self._section_header(0)[5]      # sh_size of section 0
        return self._table_fits("section", self._shoff, count, self._shentsize,
                                _SECTION[self.elfclass])

    def _table_fits(self, what: str, offset: int, count: int, entry: int, layout: str) -> int:
        """``count``, where a table of that many entries of ``entry`` bytes
        at ``offset`` holds ``layout`` and lies within the file."""
        if count and (entry < struct.calcsize("<" + layout)
                      or offset + count * entry > self._size):
            raise ValueError(f"ELF {what} headers do not fit the file")
        return count

    def segments(self) -> Iterator[ProgramHeader]:
        count = self._phnum if self._phnum < _PN_XNUM else self._section_header(0)[7]
        layout, order = _SEGMENT[self.elfclass]
        count = self._table_fits("program", self._phoff, count, self._phentsize, layout)
        for i in range(count):
            fields = self._unpack(layout, self._phoff + i * self._phentsize)
            yield ProgramHeader(*(fields[j] for j in order))

    def sections(self) -> list[Section]:
        """Every section, named from the section header string table."""
        if self._sections is None:
            headers = [self._section_header(i) for i in range(self._section_count())]
            index = self._shstrndx if self._shstrndx != _SHN_XINDEX else headers[0][6]
            names = self._data(headers[index]) if 0 < index < len(headers) else b""
            self._sections = [Section(_string_at(names, h[0]), h[1], *h[3:]) for h in headers]
        return self._sections

    def section_by_name(self, name: str) -> Section | None:
        """The last section called ``name`` (as pyelftools' lookup), or None."""
        return next((s for s in reversed(self.sections()) if s.name == name), None)

    def section(self, index: int) -> Section:
        sections = self.sections()
        if not 0 <= index < len(sections):
            raise ValueError(f"ELF section index {index} out of range")
        return sections[index]

    def data(self, section: Section) -> bytes:
        """A section's bytes (zeros for SHT_NOBITS, as pyelftools gives)."""
        if section.type == SHT_NOBITS:
            return bytes(section.size)
        return self._read(section.offset, section.size)

    def _data(self, header: tuple) -> bytes:
        return bytes(header[5]) if header[1] == SHT_NOBITS else self._read(header[4], header[5])

    def build_id(self, section_name: str | None = None) -> str | None:
        """The NT_GNU_BUILD_ID note's bytes in hex, from the first note
        section that has one (or from the section ``section_name`` only)."""
        for section in self.sections():
            if section.type == SHT_NOTE and section_name in (None, section.name):
                found = self._build_id_in(self.data(section))
                if found is not None:
                    return found
        return None

    def _build_id_in(self, notes: bytes) -> str | None:
        offset, header = 0, struct.Struct(self._order + "III")
        while offset + header.size < len(notes):
            namesz, descsz, kind = header.unpack_from(notes, offset)
            offset += header.size
            name = notes[offset:offset + namesz].split(b"\0", 1)[0]
            offset += _round4(namesz)
            if kind == NT_GNU_BUILD_ID and name == b"GNU":
                desc = notes[offset:offset + descsz]
                if len(desc) != descsz:
                    raise ValueError("ELF note cut short")
                return desc.hex()
            offset += _round4(descsz)
        return None


def _round4(size: int) -> int:
    return (size + 3) & ~3


def _string_at(strings: bytes, offset: int) -> str:
    end = strings.find(b"\0", offset)
    return strings[offset:end if end >= 0 else len(strings)].decode("utf-8", "replace")
