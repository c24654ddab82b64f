"""Instruction pointers of one process to function names.

A ``Symbolizer`` keeps the executable file mappings of one process (from
``/proc/PID/maps``; call ``snapshot()`` now and then while the process lives,
since shared objects are mapped after exec and a dead process has no maps) and
resolves arrays of IPs at once: a sorted search over mapping starts, then, per
mapped object, over its function symbols (:mod:`.elf_symbols`).

Kernel addresses of a live process are named from ``/proc/kallsyms`` as
``[k] FUNCTION`` (perf report's mark) where this user may read them, and
JIT code from the process's ``/tmp/perf-PID.map`` where its runtime writes
one (:mod:`.perf_map`).

Names that cannot be resolved: ``[kernel]`` for kernel addresses, ``[NAME]``
for anonymous special mappings such as ``[vdso]``, ``[OBJECT+0xVADDR]`` for an
address in a mapped file but in no known function, ``[unknown]`` otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from ..collectors import kallsyms
from ..core.batch import KERNEL_START, MISSING
from ..core.distinct import distinct
from .elf_symbols import ElfSymbols, load_symbols
from .maps import Mapping, maps_text, parse_maps
from .perf_map import PerfMap

UNKNOWN = "[unknown]"
KERNEL = "[kernel]"


@dataclass
class Symbolizer:
    """Resolves IPs of one process to function names; see the module docstring."""

    pid: int | None = None
    _mappings: list[Mapping] = field(default_factory=list)
    #: Name kernel addresses from the running kernel and JIT code from the
    #: process's perf map (a live process, not a recording).
    kernel_names: bool = False
    _perf_map: "PerfMap | None" = None
    _exe: tuple[str, int] | None = None  # path and inode of the main executable
    _last_maps: str = ""

    @classmethod
    def from_pid(cls, pid: int) -> "Symbolizer":
        symbolizer = cls(pid, kernel_names=True)
        symbolizer.snapshot()
        return symbolizer

    @classmethod
    def from_metadata(cls, meta: dict) -> "Symbolizer":
        """Resolves IPs through the executable mappings a trace recorded, if any."""
        symbolizer = cls()
        maps = meta.get("mappings")
        if isinstance(maps, list):
            symbolizer.add_mappings(_recorded_mapping(m) for m in maps if isinstance(m, dict))
        return symbolizer

    @property
    def mappings(self) -> list[Mapping]:
        return list(self._mappings)

    @property
    def executable(self) -> tuple[str, int] | None:
        """Path and inode of the main executable, where its maps were read."""
        return self._exe

    def snapshot(self) -> bool:
        """Re-read the process's maps and merge them into what is known
        (mappings since unmapped are kept, unless another object now occupies
        their addresses).  Whether anything changed; cheap when nothing did."""
        if self.pid is None:
            return False
        text = maps_text(self.pid)
        if text is None:
            return False
        try:
            # Ours: psutil's exe() costs 10 µs (ours 1) and drops the " (deleted)" maps keep
            exe = os.readlink(f"/proc/{self.pid}/exe")
        except OSError:
            return False
        if text == self._last_maps:
            return False
        self._last_maps = text
        mappings = parse_maps(text)
        self._exe = next(((m.path, m.inode) for m in mappings if m.path == exe), self._exe)
        return self.add_mappings(mappings)

    def add_mappings(self, mappings: Iterable[Mapping]) -> bool:
        """Merge executable mappings learnt elsewhere (e.g. perf MMAP records)."""
        incoming = [m for m in mappings if m not in self._mappings]
        if not incoming:
            return False
        kept = [old for old in self._mappings
                if not any(old.start < new.end and new.start < old.end for new in incoming)]
        self._mappings = sorted(kept + incoming)
        return True

    # -- resolving -------------------------------------------------------------

    def names(self, ips, offsets: bool = True) -> np.ndarray:
        """Function names for an array of IPs (object array, same shape).
        With ``offsets=False``, addresses in an object but in no known function
        are named ``[OBJECT]`` rather than ``[OBJECT+0xVADDR]``."""
        ips = np.asarray(ips, dtype=np.uint64)
        unique, inverse = np.unique(ips.ravel(), return_inverse=True)
        return self._resolve_unique(unique, offsets)[inverse].reshape(ips.shape)

    def top_functions(self, ips, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` functions with most of the IPs, with their shares (0..1),
        most frequent first; unresolved addresses count per object."""
        ips = np.asarray(ips, dtype=np.uint64).ravel()
        if ips.size == 0:
            return []
        unique, counts = np.unique(ips, return_counts=True)
        names, name_index = np.unique(self._resolve_unique(unique, offsets=False),
                                      return_inverse=True)
        totals = np.bincount(name_index, weights=counts)
        order = np.lexsort((names, -totals))[:k]  # ties in name order, for stable output
        return [(str(names[i]), float(totals[i] / ips.size)) for i in order]

    def mapping_indices(self, ips) -> np.ndarray:
        """For each IP, the index in :attr:`mappings` of the mapping it is in, or -1."""
        ips = np.asarray(ips, dtype=np.uint64)
        if not self._mappings:
            return np.full(ips.shape, -1, np.intp)
        starts = np.array([m.start for m in self._mappings], dtype=np.uint64)
        ends = np.array([m.end for m in self._mappings], dtype=np.uint64)
        which = np.searchsorted(starts, ips, side="right") - 1
        inside = (which >= 0) & (ips < ends[np.maximum(which, 0)])
        return np.where(inside, which, -1)

    def build_id(self, mapping: Mapping) -> str:
        """The GNU build id of the file ``mapping`` maps, or ""."""
        symbols = self._symbols_for(mapping) if mapping.is_file else None
        return symbols.build_id if symbols is not None else ""

    def covers(self, ips: np.ndarray) -> np.ndarray:
        """Whether each IP lies in a mapping known so far."""
        return self.mapping_indices(ips) >= 0

    def text_range(self) -> tuple[int, int]:
        """(lo, hi) run-time addresses of the main executable's ``.text``."""
        if self._exe is None:
            raise LookupError(f"process {self.pid}: main executable not seen in its maps")
        path, inode = self._exe
        symbols = load_symbols(path, inode)
        mapping = next((m for m in self._mappings if (m.path, m.inode) == self._exe), None)
        if symbols is None or symbols.text is None or mapping is None:
            raise LookupError(f"{path}: no readable ELF .text section")
        bias = symbols.bias(mapping)
        return symbols.text[0] + bias, symbols.text[1] + bias

    def _resolve_unique(self, ips: np.ndarray, offsets: bool) -> np.ndarray:
        out = np.full(ips.shape, UNKNOWN, dtype=object)
        kernel = ips >= KERNEL_START
        out[kernel] = KERNEL
        if self.kernel_names and kernel.any():
            out[kernel] = _kernel_names(ips[kernel])
        if self._mappings:
            self._resolve_mapped(ips, out, offsets)
        if self.pid is not None and self.kernel_names:
            self._name_jit_code(ips, out)
        return out

    def _resolve_mapped(self, ips: np.ndarray, out: np.ndarray, offsets: bool) -> None:
        """Names of the IPs in known mappings (JIT code's: its anonymous mapping's)."""
        which = self.mapping_indices(ips)
        for index in distinct(which[which >= 0]):
            selected = which == index
            out[selected] = self._resolve_in(self._mappings[index], ips[selected], offsets)

    def _name_jit_code(self, ips: np.ndarray, out: np.ndarray) -> None:
        """JIT functions from the perf map, for addresses no file names."""
        anonymous = np.array([n == UNKNOWN or (isinstance(n, str) and n.startswith("[")
                                                and not n.startswith(("[k] ", "[kernel]")))
                              for n in out], dtype=bool) if len(out) else np.zeros(0, bool)
        if not anonymous.any():
            return
        if self._perf_map is None:
            self._perf_map = PerfMap(self.pid)
        found = self._perf_map.lookup(ips[anonymous])
        named = np.array([f is not None for f in found], dtype=bool)
        where = np.flatnonzero(anonymous)[named]
        out[where] = found[named]

    def _resolve_in(self, mapping: Mapping, ips: np.ndarray, offsets: bool) -> np.ndarray:
        if not mapping.is_file:
            return np.full(ips.shape, mapping.path or UNKNOWN, dtype=object)
        symbols = self._symbols_for(mapping)
        label = os.path.basename(mapping.path)
        if symbols is None:
            vaddrs = ips - np.uint64(mapping.start) + np.uint64(mapping.offset)
            return _object_labels(label, vaddrs, offsets)
        vaddrs = ips - np.uint64(symbols.bias(mapping) % 2**64)
        found = symbols.lookup(vaddrs)
        names = np.empty(ips.shape, dtype=object)
        hit = found >= 0
        names[hit] = symbols.function_names(found[hit])
        names[~hit] = _object_labels(label, vaddrs[~hit], offsets)
        return names

    def _symbols_for(self, mapping: Mapping) -> ElfSymbols | None:
        symbols = load_symbols(mapping.path, mapping.inode)
        if symbols is None and self.pid is not None:
            # The file was replaced or deleted; the kernel still has the mapped one.
            mapped = f"/proc/{self.pid}/map_files/{mapping.start:x}-{mapping.end:x}"
            symbols = load_symbols(mapped, mapping.inode)
        return symbols


def _kernel_names(ips: np.ndarray) -> np.ndarray:
    """``[k] FUNCTION`` for each kernel address; ``[kernel]`` where the
    kernel's symbols cannot be read (or for MISSING, a sample the source
    could not place)."""
    symbols = kallsyms.running_kernel()
    names = np.full(ips.shape, KERNEL, dtype=object)
    if symbols is None:
        return names
    known = ips != MISSING
    found = symbols.lookup(ips[known])
    names[known] = np.array([KERNEL if f is None else f"[k] {f}" for f in found], dtype=object)
    return names


def _recorded_mapping(m: dict) -> Mapping:
    path = str(m.get("path", ""))
    try:
        inode = os.stat(path).st_ino if path.startswith("/") else 0
    except OSError:
        inode = 0
    return Mapping(int(m["start"]), int(m["end"]), int(m.get("offset", 0)), path, inode)


def _object_labels(label: str, vaddrs: np.ndarray, offsets: bool) -> np.ndarray:
    if not offsets:
        return np.full(vaddrs.shape, f"[{label}]", dtype=object)
    return np.array([f"[{label}+0x{int(v):x}]" for v in vaddrs], dtype=object)


def runtime_text_range(pid: int) -> tuple[int, int]:
    """(lo, hi) run-time addresses of the ``.text`` of the main executable of ``pid``."""
    return Symbolizer.from_pid(pid).text_range()
