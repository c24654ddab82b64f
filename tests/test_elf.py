"""The ELF header reader (phasewatch.formats.elf) against pyelftools, the
reference for the same fields, on real files of this host."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from phasewatch.formats.catalog import program_key
from phasewatch.formats.elf import PT_LOAD, ElfFile
from phasewatch.live.elf_symbols import load_symbols

SECTIONS = (".text", ".symtab", ".dynsym", ".strtab", ".note.gnu.build-id")


def pyelftools_view(path) -> dict:
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        build_id = next((note["n_desc"] for section in elf.iter_sections()
                         if section["sh_type"] == "SHT_NOTE"
                         for note in section.iter_notes()
                         if note["n_type"] == "NT_GNU_BUILD_ID"), None)
        sections = {}
        for name in SECTIONS:
            section = elf.get_section_by_name(name)
            sections[name] = None if section is None else (
                section["sh_addr"], section["sh_size"], section["sh_link"], section.data())
        return {"class": elf.elfclass, "little": elf.little_endian,
                "loads": [(s["p_vaddr"], s["p_offset"], s["p_filesz"], s["p_flags"])
                          for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"],
                "sections": sections, "build_id": build_id}


def our_view(path) -> dict:
    with open(path, "rb") as stream:
        elf = ElfFile(stream)
        sections = {}
        for name in SECTIONS:
            section = elf.section_by_name(name)
            sections[name] = None if section is None else (
                section.addr, section.size, section.link, elf.data(section))
        return {"class": elf.elfclass, "little": elf.little_endian,
                "loads": [(s.vaddr, s.offset, s.filesz, s.flags)
                          for s in elf.segments() if s.type == PT_LOAD],
                "sections": sections, "build_id": elf.build_id()}


@pytest.fixture(scope="module")
def elf32_object(tmp_path_factory) -> Path:
    """A 32-bit relocatable object (objcopy of a 64-bit one)."""
    if shutil.which("gcc") is None or shutil.which("objcopy") is None:
        pytest.fail("this test needs gcc and binutils (apt-get install gcc binutils)")
    folder = tmp_path_factory.mktemp("elf32")
    (folder / "f.c").write_text("int twice(int x) { return 2 * x; }\n"
                                "int thrice(int x) { return 3 * x; }\n")
    subprocess.run(["gcc", "-c", "-o", folder / "f.o", folder / "f.c"], check=True)
    subprocess.run(["objcopy", "-O", "elf32-i386", folder / "f.o", folder / "f32.o"], check=True)
    return folder / "f32.o"


@pytest.mark.parametrize("path", [
    "abab", "elf32", "/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/bin/gzip"])
def test_headers_sections_and_build_id_are_pyelftools(abab, elf32_object, path):
    path = {"abab": abab, "elf32": elf32_object}.get(path, path)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed here")
    ours, reference = our_view(path), pyelftools_view(path)
    assert ours == reference
    assert ours["sections"][".text"] is not None


def test_a_32_bit_object_has_its_class_and_symbols(elf32_object):
    view = our_view(elf32_object)
    assert view["class"] == 32 and view["little"]
    # a relocatable object's first function is at 0, which the table leaves out
    assert "thrice" in load_symbols(str(elf32_object)).names.tolist()


def test_the_build_id_is_what_readelf_shows(abab):
    out = subprocess.run(["readelf", "-n", abab], capture_output=True, text=True,
                         check=True).stdout
    shown = next(line.split(":", 1)[1].strip() for line in out.splitlines()
                 if "Build ID" in line)
    with open(abab, "rb") as stream:
        assert ElfFile(stream).build_id() == shown
        assert ElfFile(stream).build_id(".note.gnu.build-id") == shown
        assert ElfFile(stream).build_id(".no-such-section") is None
    assert program_key(str(abab))[0] == f"build-id:{shown}"


@pytest.mark.parametrize("cut", [0, 3, 40, 63, "sections"])
def test_a_file_cut_short_or_not_elf_is_a_value_error(abab, tmp_path, cut):
    data = Path(abab).read_bytes()
    if cut == "sections":
        with open(abab, "rb") as stream:
            cut = ElfFile(stream)._shoff + 10      # inside the section headers
    bad = tmp_path / "bad"
    bad.write_bytes(data[:cut])
    with open(bad, "rb") as stream, pytest.raises(ValueError):
        ElfFile(stream).sections()
    assert load_symbols(str(bad)) is None
    assert program_key(str(bad))[0].startswith("path:")


def test_a_text_file_is_not_elf(tmp_path):
    text = tmp_path / "script"
    text.write_text("#!/bin/sh\necho hello, this is not an ELF file at all\n")
    with open(text, "rb") as stream, pytest.raises(ValueError, match="not an ELF file"):
        ElfFile(stream)


@pytest.mark.parametrize("field, value", [("e_shentsize", 0), ("e_shnum", 0xFFFE),
                                          ("e_phentsize", 0), ("e_phnum", 0xFFFE)])
def test_header_tables_that_cannot_fit_the_file_are_a_value_error(abab, tmp_path, field, value):
    """A table claimed larger than the file (or of empty entries, read at one
    offset forever) is refused at once."""
    offsets = {"e_phentsize": 54, "e_phnum": 56, "e_shentsize": 58, "e_shnum": 60}   # ELF64
    data = bytearray(Path(abab).read_bytes())
    data[offsets[field]:offsets[field] + 2] = value.to_bytes(2, "little")
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(data))
    with open(bad, "rb") as stream, pytest.raises(ValueError, match="do not fit the file"):
        elf = ElfFile(stream)
        elf.sections()
        list(elf.segments())
    assert load_symbols(str(bad)) is None
