"""Instruction pointers to function names, from the ELF symbol tables of the
objects a process maps.

A ``Symbolizer`` keeps the executable file mappings of one process (from
``/proc/PID/maps``; call ``snapshot()`` now and then while the process lives,
since shared objects are mapped after exec and a dead process has no maps) and
resolves arrays of IPs at once: a sorted search over mapping starts, then, per
mapped object, over its function symbols.  Symbol tables are read with
pyelftools, once per file (path + inode): ``.symtab``, else the one in the
separate debug file found by build id (``/usr/lib/debug/.build-id``), else
``.dynsym``.

A run-time address ``ip`` in a mapping corresponds to the file virtual address
``ip - bias``, where, for the PT_LOAD segment that the mapping's file offset
falls in, ``bias = map_start - map_offset - (p_vaddr - p_offset)``: zero for a
non-PIE executable, the load address for PIE executables and shared objects.

Names that cannot be resolved: ``[kernel]`` for kernel addresses, ``[NAME]``
for anonymous special mappings such as ``[vdso]``, ``[OBJECT+0xVADDR]`` for an
address in a mapped file but in no known function, ``[unknown]`` otherwise.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, NamedTuple

import numpy as np

from ..core.batch import KERNEL_START

if TYPE_CHECKING:   # pyelftools and cxxfilt load when symbols are first looked up
    from elftools.elf.elffile import ELFFile

UNKNOWN = "[unknown]"
KERNEL = "[kernel]"
DEBUG_ROOT = Path("/usr/lib/debug")

_FUNCTION_TYPES = ("STT_FUNC", "STT_GNU_IFUNC")
#: When several symbols share an address, the first of these bindings names it.
_BINDING_RANK = {"STB_GLOBAL": 0, "STB_WEAK": 1, "STB_LOCAL": 2}


# ----------------------------------------------------------------------------
# /proc/PID/maps


class Mapping(NamedTuple):
    start: int
    end: int
    offset: int
    path: str  # file path, or a name in brackets such as "[vdso]"
    inode: int

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")


def read_maps(pid: int) -> list[Mapping]:
    """The executable mappings of ``pid`` (empty if it has gone)."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return parse_maps(text)


def parse_maps(text: str) -> list[Mapping]:
    """The executable mappings listed in a ``/proc/PID/maps`` text."""
    mappings = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or "x" not in fields[1]:
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        path = fields[5].strip() if len(fields) > 5 else ""
        mappings.append(Mapping(start, end, int(fields[2], 16), path, int(fields[4])))
    return mappings


# ----------------------------------------------------------------------------
# one ELF object


@dataclass(frozen=True)
class Segment:
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
    names: np.ndarray  # object
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
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(path, "rb") as stream:
            elf = ELFFile(stream)
            segments = tuple(_load_segments(elf))
            text = _section_range(elf, ".text")
            build_id = _build_id(elf) or ""
            rows, source = _function_rows_of(elf, ".symtab"), ".symtab"
            if not rows:
                rows, source = _debug_file_rows(elf), "debug file .symtab"
            if not rows:
                rows, source = _function_rows_of(elf, ".dynsym"), ".dynsym"
    except (OSError, ELFError, ValueError):
        return None
    starts, ends, names = _sorted_functions(rows)
    return ElfSymbols(path, starts, ends, names, segments, text, source, build_id)


def _load_segments(elf: ELFFile) -> Iterable[Segment]:
    for segment in elf.iter_segments():
        if segment["p_type"] == "PT_LOAD":
            yield Segment(segment["p_vaddr"], segment["p_offset"], segment["p_filesz"],
                          bool(segment["p_flags"] & 0x1))  # PF_X


def _section_range(elf: ELFFile, name: str) -> tuple[int, int] | None:
    section = elf.get_section_by_name(name)
    if section is None:
        return None
    return section["sh_addr"], section["sh_addr"] + section["sh_size"]


def _function_rows_of(elf: ELFFile, section_name: str) -> list:
    section = elf.get_section_by_name(section_name)
    return _function_rows(section) if section is not None else []


def _debug_file_rows(elf: ELFFile) -> list:
    """Function rows from the separate debug file of ``elf``, if installed;
    it has the same vaddrs as the stripped file."""
    build_id = _build_id(elf)
    if not build_id:
        return []
    debug_path = DEBUG_ROOT / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(debug_path, "rb") as stream:
            return _function_rows_of(ELFFile(stream), ".symtab")
    except (OSError, ELFError):
        return []


def _build_id(elf: ELFFile) -> str | None:
    for section in elf.iter_sections():
        if section["sh_type"] == "SHT_NOTE":
            for note in section.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return note["n_desc"]
    return None


def _function_rows(table) -> list[tuple[int, int, int, str]]:
    """(start, size, binding rank, name) of the defined functions in ``table``."""
    rows = []
    for symbol in table.iter_symbols():
        info = symbol["st_info"]
        if (info["type"] in _FUNCTION_TYPES and symbol["st_value"]
                and symbol["st_shndx"] != "SHN_UNDEF" and symbol.name):
            rows.append((symbol["st_value"], symbol["st_size"],
                         _BINDING_RANK.get(info["bind"], 3), symbol.name))
    return rows


def _underscores(name: str) -> int:
    """Leading underscores: of aliases, ``getpid`` reads better than ``__getpid``."""
    return len(name) - len(name.lstrip("_"))


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
    names = np.array([demangle(row[3]) for row in unique], dtype=object)
    next_starts = np.append(starts[1:], np.uint64(np.iinfo(np.uint64).max))
    ends = np.where(sizes > 0, starts + sizes, next_starts)
    return starts, ends, names


# ----------------------------------------------------------------------------
# a process


@dataclass
class Symbolizer:
    """Resolves IPs of one process to function names; see the module docstring."""

    pid: int | None = None
    _mappings: list[Mapping] = field(default_factory=list)
    _exe: tuple[str, int] | None = None  # path and inode of the main executable
    _last_maps: str = ""

    @classmethod
    def from_pid(cls, pid: int) -> "Symbolizer":
        symbolizer = cls(pid)
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
        try:
            text = Path(f"/proc/{self.pid}/maps").read_text()
            exe = os.readlink(f"/proc/{self.pid}/exe")
        except (FileNotFoundError, ProcessLookupError):
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
        out[ips >= KERNEL_START] = KERNEL
        if not self._mappings:
            return out
        starts = np.array([m.start for m in self._mappings], dtype=np.uint64)
        ends = np.array([m.end for m in self._mappings], dtype=np.uint64)
        which = np.searchsorted(starts, ips, side="right") - 1
        inside = (which >= 0) & (ips < ends[np.maximum(which, 0)])
        for index in np.unique(which[inside]):
            selected = inside & (which == index)
            out[selected] = self._resolve_in(self._mappings[index], ips[selected], offsets)
        return out

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
        names[hit] = symbols.names[found[hit]]
        names[~hit] = _object_labels(label, vaddrs[~hit], offsets)
        return names

    def _symbols_for(self, mapping: Mapping) -> ElfSymbols | None:
        symbols = load_symbols(mapping.path, mapping.inode)
        if symbols is None and self.pid is not None:
            # The file was replaced or deleted; the kernel still has the mapped one.
            mapped = f"/proc/{self.pid}/map_files/{mapping.start:x}-{mapping.end:x}"
            symbols = load_symbols(mapped, mapping.inode)
        return symbols


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


# ----------------------------------------------------------------------------
# a process tree

def _locked(method):
    """``method`` under the tree's lock: the tree watch learns on its own thread."""
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    locked.__doc__ = method.__doc__
    return locked


#: Threads looked at per batch, at most (their maps are read only when their
#: IPs fall outside what is known of their process).
MAX_NEW_THREADS = 16


class TreeSymbolizer:
    """Resolves the IPs of a watched process tree, each thread's in the
    mappings of its own process: a child that exec'd another program (``sh -c
    'bzip2 …; perl …'``, a compiler driver's ``cc1``) is named from its own
    objects, not its parent's.  ``watch`` reads the maps of the threads of a
    batch whose IPs are new to their process while they still run;
    ``learn_tree`` reads those of each process as it starts or execs, and
    ``snapshot`` re-reads those of every live process of the tree (both from
    :mod:`.tree_watch`, once or twice a second)."""

    def __init__(self, root: Symbolizer):
        self.root = root
        self._by_pid: dict[int, Symbolizer] = {root.pid: root}
        self._pid_of: dict[int, int] = {root.pid: root.pid}
        self._exe_of: dict[int, str] = {}
        # learn_tree runs on a thread of its own (live.tree_watch)
        self._lock = threading.RLock()

    def learn_tree(self, pids: list[int]) -> bool:
        """Note every thread of the tree's processes ``pids`` (:func:`descendants`)
        and read the maps of each process new or exec'd since the last look:
        a child that ends before its samples reach the agent is still named
        from its own objects.  Whether any process was new or exec'd."""
        changed = False
        for pid in pids:
            try:
                exe, tids = os.readlink(f"/proc/{pid}/exe"), os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            with self._lock:
                for tid in tids:
                    self._pid_of.setdefault(int(tid), pid)
                if self._exe_of.get(pid) != exe:
                    self._exe_of[pid] = exe
                    self._of_process(pid).snapshot()
                    changed = True
        return changed

    @property
    def pid(self) -> int | None:
        return self.root.pid

    @_locked
    def watch(self, ips: np.ndarray, tids: np.ndarray) -> None:
        """Learn the mappings that a batch's IPs need, while their processes live."""
        user = np.asarray(ips, np.uint64) < np.uint64(KERNEL_START)
        for tid in np.unique(np.asarray(tids)[user])[:MAX_NEW_THREADS].tolist():
            symbolizer = self.of_thread(tid)
            mine = user & (tids == tid)
            if not symbolizer.covers(ips[mine]).all():
                symbolizer.snapshot()

    @_locked
    def snapshot(self, pids: list[int] | None = None) -> bool:
        """Re-read the maps of the tree's processes ``pids`` (default: every
        live one); whether any changed."""
        if pids is None:
            pids = descendants(self.root.pid) if self.root.pid is not None else []
        changed = False
        for pid in pids:
            changed |= self._of_process(pid).snapshot()
        return changed

    @_locked
    def of_thread(self, tid: int) -> Symbolizer:
        """The symbolizer of the process ``tid`` belongs to (the root's if it has gone)."""
        pid = self._pid_of.get(tid)
        if pid is None:
            pid = process_of_thread(tid)
            if pid is None:
                return self.root
            self._pid_of[tid] = pid
        return self._of_process(pid)

    def _of_process(self, pid: int) -> Symbolizer:
        if pid not in self._by_pid:
            self._by_pid[pid] = Symbolizer.from_pid(pid)
        return self._by_pid[pid]

    @_locked
    def names(self, ips, tids=None, offsets: bool = True) -> np.ndarray:
        """Function names of ``ips``, each resolved in the process of its thread."""
        ips = np.asarray(ips, np.uint64)
        if tids is None:
            return self.root.names(ips, offsets)
        tids = np.asarray(tids)
        out = np.empty(ips.shape, dtype=object)
        for tid in np.unique(tids).tolist():
            mine = tids == tid
            out[mine] = self.of_thread(tid).names(ips[mine], offsets)
        return out


def process_of_thread(tid: int) -> int | None:
    """The process (thread group) of thread ``tid``, None if it has gone."""
    try:
        with open(f"/proc/{tid}/status") as status:
            for line in status:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    """``pid`` and its live descendants (from ``/proc/PID/task/TID/children``)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children") as children:
                    queue += [int(child) for child in children.read().split()]
            except (OSError, ValueError):
                continue
    return found
