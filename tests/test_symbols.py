"""Symbolising real instruction pointers of real processes (phasewatch.live.maps,
.elf_symbols and .symbolizer)."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from phasewatch.collectors import kallsyms
from phasewatch.live.child import Child
from phasewatch.live.elf_symbols import load_symbols, text_range
from phasewatch.live.maps import Mapping, parse_maps, read_maps
from phasewatch.live.symbolizer import KERNEL, UNKNOWN, Symbolizer, runtime_text_range


class RunningAbab:
    """abab started with --print-addrs: the run-time addresses it reports of
    its own functions are the oracle the symbolizer is checked against."""

    def __init__(self, abab: Path, *args: str):
        self.process = subprocess.Popen([abab, *args, "--print-addrs"], stdout=subprocess.PIPE,
                                        text=True)
        self.addrs = {}
        for _ in range(3):
            name, addr = self.process.stdout.readline().split()
            self.addrs[name] = int(addr, 16)
        self.pid = self.process.pid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.process.kill()
        self.process.wait()


def nm_addresses(path: Path) -> dict[str, int]:
    """File vaddrs of the text symbols of ``path``, from binutils' nm."""
    out = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True,
                         check=True).stdout
    return {name: int(addr, 16) for addr, kind, name in (line.split() for line in out.splitlines())
            if kind in "Tt"}


def readelf_text(path: Path) -> tuple[int, int]:
    """(lo, hi) of .text from binutils' readelf."""
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        fields = line.replace("[ ", "[").split()
        if len(fields) > 5 and fields[1] == ".text":
            addr, size = int(fields[3], 16), int(fields[5], 16)
            return addr, addr + size
    raise AssertionError("no .text in readelf output")


# ---------------------------------------------------------------------------
# the PIE test program


def test_pie_functions_resolve_at_their_run_time_addresses(abab):
    with RunningAbab(abab, "5") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        a, b, main = run.addrs["region_a"], run.addrs["region_b"], run.addrs["main"]
        assert a != nm_addresses(abab)["region_a"]  # relocated: a PIE really has a load bias
        ips = np.array([a, a + 1, a + 0x40, b, b + 0x20, main + 2], dtype=np.uint64)
        assert list(symbolizer.names(ips)) == [
            "region_a", "region_a", "region_a", "region_b", "region_b", "main"]


def test_address_in_no_function_names_the_object_and_file_vaddr(abab):
    file_vaddrs = nm_addresses(abab)
    with RunningAbab(abab, "5") as run:
        bias = run.addrs["region_a"] - file_vaddrs["region_a"]
        symbolizer = Symbolizer.from_pid(run.pid)
        # region_a is a few hundred bytes; the page-aligned padding function follows it.
        gap = file_vaddrs["abab_padding"] - 8
        assert symbolizer.names([gap + bias])[0] == f"[abab+0x{gap:x}]"
        assert symbolizer.names([gap + bias], offsets=False)[0] == "[abab]"


def test_text_range_matches_readelf_in_the_file_and_at_run_time(abab):
    lo, hi = text_range(abab)
    assert (lo, hi) == readelf_text(abab)
    with RunningAbab(abab, "5") as run:
        bias = run.addrs["region_a"] - nm_addresses(abab)["region_a"]
        assert runtime_text_range(run.pid) == (lo + bias, hi + bias)
        run_lo, run_hi = runtime_text_range(run.pid)
        assert run_lo <= run.addrs["region_a"] < run.addrs["region_b"] < run_hi


def test_shared_object_function_in_the_program_resolves(abab):
    """A libc function inside abab's address space: its address comes from
    the dynamic loader of this process plus where abab mapped the same libc."""
    libc = ctypes.CDLL("libc.so.6")
    here = ctypes.cast(libc.qsort, ctypes.c_void_p).value
    mine = libc_text_mapping(os.getpid())
    with RunningAbab(abab, "5") as run:
        theirs = libc_text_mapping(run.pid)
        assert theirs.inode == mine.inode and theirs.offset == mine.offset
        ip = here - mine.start + theirs.start + 5
        assert Symbolizer.from_pid(run.pid).names([ip])[0] == "qsort"


def libc_text_mapping(pid: int) -> Mapping:
    return next(m for m in read_maps(pid) if os.path.basename(m.path).startswith("libc.so"))


# ---------------------------------------------------------------------------
# this very process: the loader (dlsym) is the oracle


def test_libc_and_interpreter_functions_of_this_process():
    libc = ctypes.CDLL("libc.so.6")
    expected = {
        "qsort": ctypes.cast(libc.qsort, ctypes.c_void_p).value,
        "PyObject_Call": ctypes.cast(ctypes.pythonapi.PyObject_Call, ctypes.c_void_p).value,
        "PyList_Append": ctypes.cast(ctypes.pythonapi.PyList_Append, ctypes.c_void_p).value,
    }
    names = Symbolizer.from_pid(os.getpid()).names(
        np.array([addr + 1 for addr in expected.values()], dtype=np.uint64))
    assert list(names) == list(expected)


def test_special_and_unmapped_addresses():
    symbolizer = Symbolizer.from_pid(os.getpid())
    vdso = next(m for m in symbolizer.mappings if m.path == "[vdso]")
    ips = np.array([0, 0x1000, 0xFFFF_FFFF_8100_0000, vdso.start + 16], dtype=np.uint64)
    names = list(symbolizer.names(ips))
    assert names[:2] == [UNKNOWN, UNKNOWN] and names[3] == "[vdso]"
    # the kernel's own name for the address where this user may read it, as perf report's
    assert names[2] == KERNEL if kallsyms.running_kernel() is None else names[2].startswith("[k] ")


def test_kernel_symbols_name_addresses_and_hidden_ones_name_nothing(tmp_path):
    listing = tmp_path / "kallsyms"
    listing.write_text("ffffffff81000000 T _text\nffffffff81000100 t read_zero\n"
                       "ffffffff81000200 D some_data\nffffffff81000300 T write_null\n")
    symbols = kallsyms.read(str(listing))
    ips = np.array([0xFFFFFFFF81000150, 0xFFFFFFFF81000250, 0xFFFFFFFF81000000], np.uint64)
    assert list(symbols.lookup(ips)) == ["read_zero", "read_zero", "_text"]
    hidden = tmp_path / "hidden"
    hidden.write_text("0000000000000000 T _text\n0000000000000000 t read_zero\n")
    assert kallsyms.read(str(hidden)) is None
    assert kallsyms.read(str(tmp_path / "absent")) is None


def test_names_keep_the_shape_and_accept_empty_input(abab):
    with RunningAbab(abab, "5") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        grid = np.array([[run.addrs["region_a"], run.addrs["region_b"]]] * 3, dtype=np.uint64)
        names = symbolizer.names(grid)
        assert names.shape == (3, 2) and set(names[:, 0]) == {"region_a"}
        assert symbolizer.names(np.array([], dtype=np.uint64)).shape == (0,)
        assert symbolizer.top_functions(np.array([], dtype=np.uint64)) == []


def test_top_functions_counts_shares(abab):
    with RunningAbab(abab, "5") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        a, b = run.addrs["region_a"], run.addrs["region_b"]
        # 6 IPs in region_a spread over 3 addresses, 3 in region_b, 1 unknown
        ips = np.array([a, a + 4, a + 8, a, a + 4, a + 8, b, b + 1, b + 2, 0], dtype=np.uint64)
        assert symbolizer.top_functions(ips, k=5) == [
            ("region_a", 0.6), ("region_b", 0.3), (UNKNOWN, 0.1)]
        assert symbolizer.top_functions(ips, k=1) == [("region_a", 0.6)]


# ---------------------------------------------------------------------------
# maps snapshots


def test_names_still_resolve_after_the_process_has_exited(abab):
    with RunningAbab(abab, "0") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        run.process.wait()
        assert not symbolizer.snapshot()  # gone: what was known is kept
        assert symbolizer.names([run.addrs["region_b"]])[0] == "region_b"


def test_snapshot_from_before_exec_to_after_loading(abab):
    child = Child.start([abab, "5"], pin=False)
    try:
        symbolizer = Symbolizer.from_pid(child.pid)  # still the forked interpreter
        child.release()
        assert symbolizer.snapshot()
        paths = {m.path for m in symbolizer.mappings}
        assert str(abab) in paths
        assert symbolizer.text_range()[0] > 0
    finally:
        child.stop()


def test_merging_replaces_only_overlapping_mappings():
    old = parse_maps(
        "1000-2000 r-xp 00000000 08:01 11 /lib/old.so\n"
        "5000-6000 r-xp 00001000 08:01 12 /lib/kept.so\n"
        "7000-8000 rw-p 00000000 08:01 13 /lib/data-only.so\n")
    assert [m.path for m in old] == ["/lib/old.so", "/lib/kept.so"]
    symbolizer = Symbolizer()
    assert symbolizer.add_mappings(old)
    assert not symbolizer.add_mappings(old)
    new = parse_maps("1800-3000 r-xp 00000000 08:01 14 /lib/new.so\n")
    assert symbolizer.add_mappings(new)
    assert [m.path for m in symbolizer.mappings] == ["/lib/new.so", "/lib/kept.so"]


def test_symbols_are_read_once_per_file(abab):
    assert load_symbols(str(abab)) is load_symbols(str(abab))
    assert load_symbols(str(abab), inode=os.stat(abab).st_ino + 1) is None


# ---------------------------------------------------------------------------
# real samples


def sample_ips(argv, period_ns: int = 1_000_000) -> np.ndarray:
    """IPs of cpu-clock samples of ``argv``, in time order, attached before exec."""
    perf = pytest.importorskip("perf")
    child = Child.start(argv)
    try:
        cpus, threads = perf.cpu_map(), perf.thread_map(child.pid)
        evsel = perf.evsel(type=perf.TYPE_SOFTWARE, config=perf.COUNT_SW_CPU_CLOCK, freq=0,
                           sample_period=period_ns, wakeup_events=64, disabled=1,
                           enable_on_exec=1, inherit=1,
                           sample_type=perf.SAMPLE_IP | perf.SAMPLE_TIME | perf.SAMPLE_TID)
        try:
            evsel.open(cpus=cpus, threads=threads)
        except OSError as exc:
            pytest.skip(f"cannot open a cpu-clock sampling event here: {exc}")
        evlist = perf.evlist(cpus, threads)
        evlist.add(evsel)
        evlist.mmap()
        child.release()
        symbolizer = Symbolizer.from_pid(child.pid)
        times, ips = [], []
        while child.poll() is None:
            evlist.poll(timeout=100)
            drain(perf, evlist, cpus, times, ips)
            symbolizer.snapshot()
        drain(perf, evlist, cpus, times, ips)
    finally:
        child.stop()
    order = np.argsort(np.array(times))
    return symbolizer, np.array(ips, dtype=np.uint64)[order]


def drain(perf, evlist, cpus, times, ips):
    for cpu in cpus:
        while (event := evlist.read_on_cpu(cpu)) is not None:
            if isinstance(event, perf.sample_event):
                times.append(event.sample_time)
                ips.append(event.sample_ip)


def test_sampled_ips_of_abab_name_its_phases(abab):
    symbolizer, ips = sample_ips([abab, "0.6"])
    assert len(ips) > 1000  # 1.8 s of CPU at 1 kHz
    first, middle, last = np.array_split(ips, 3)
    assert symbolizer.top_functions(first, k=1)[0][0] == "region_a"
    assert symbolizer.top_functions(middle, k=1)[0][0] == "region_b"
    assert symbolizer.top_functions(last, k=1)[0][0] == "region_a"
    top_share = dict(symbolizer.top_functions(ips, k=10))
    assert top_share["region_a"] > 0.5 and top_share["region_b"] > 0.2


def _pyelftools_function_rows(path: str, section_name: str) -> list:
    """The oracle: the same rows from pyelftools' own symbol objects."""
    from elftools.elf.elffile import ELFFile
    ranks = {"STB_GLOBAL": 0, "STB_WEAK": 1, "STB_LOCAL": 2}
    with open(path, "rb") as stream:
        table = ELFFile(stream).get_section_by_name(section_name)
        return sorted((s["st_value"], s["st_size"], ranks.get(s["st_info"]["bind"], 3), s.name)
                      for s in table.iter_symbols()
                      if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]
                      and s["st_shndx"] != "SHN_UNDEF" and s.name)


@pytest.mark.parametrize("path, section", [
    ("abab", ".symtab"), ("/usr/bin/python3.11", ".dynsym"),
    ("/usr/lib/x86_64-linux-gnu/libc.so.6", ".dynsym"),
    ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", ".dynsym")])
def test_symbol_tables_read_as_arrays_give_pyelftools_rows(abab, path, section):
    from phasewatch.formats.elf import ElfFile
    from phasewatch.live.elf_symbols import _function_rows
    path = str(abab) if path == "abab" else path
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed here")
    expected = _pyelftools_function_rows(path, section)
    with open(path, "rb") as stream:
        elf = ElfFile(stream)
        rows = sorted(_function_rows(elf, elf.section_by_name(section)))
    assert len(rows) > 5
    assert rows == expected


def test_cpp_names_are_demangled_when_looked_up():
    path = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed here")
    symbols = load_symbols(path)
    mangled = [i for i, name in enumerate(symbols.names) if name.startswith("_ZNSt")]
    assert mangled
    names = symbols.function_names(np.array(mangled[:50]))
    assert all(name.startswith("std::") for name in names)
    found = symbols.lookup(symbols.starts[mangled[:1]])
    assert symbols.function_names(found)[0] == names[0]


def _kallsyms_line_by_line(listing: bytes) -> tuple[list[int], list[str]]:
    """The oracle: each line split, as perf's own reader does."""
    rows = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] in kallsyms.CODE_TYPES and int(fields[0], 16):
            rows.append((int(fields[0], 16), fields[2].decode("utf-8", "backslashreplace")))
    rows.sort(key=lambda row: row[0])       # stable: equal addresses keep the listing's order
    return [a for a, _ in rows], [n for _, n in rows]


def test_kernel_symbols_read_as_arrays_are_the_lines_split():
    listing = (b"ffffffff81000300 T write_null\nffffffff81000100 t read_zero\n"
               b"ffffffffc0001000 t mod_fn\t[some_module]\nffffffff81000200 D some_data\n"
               b"ffffffff81000100 W read_zero_alias\nffffffffc0002000 T other\xff\t[m2]\n"
               b"ffffffff81000000 T _text")             # no newline at the end
    symbols = kallsyms.parse(listing)
    starts, names = _kallsyms_line_by_line(listing)
    assert symbols.starts.tolist() == starts and symbols.names.tolist() == names
    ips = np.array([0xFFFFFFFF81000150, 0xFFFFFFFFC0001004, 0xFFFFFFFFC0002010, 0x10], np.uint64)
    assert list(symbols.lookup(ips)) == ["read_zero_alias", "mod_fn", "other\\xff", None]
    proc = Path("/proc/kallsyms")
    if proc.is_file() and kallsyms.running_kernel() is not None:
        listing = proc.read_bytes()
        starts, names = _kallsyms_line_by_line(listing)
        symbols = kallsyms.parse(listing)
        assert symbols.starts.tolist() == starts and symbols.names.tolist() == names


@pytest.mark.parametrize("listing", [b"ffffffff8100000 T short_address\nffffffff81000000 T f\n",
                                     b"ffffffff8100zz00 T not_hex\n", b"ffffffff81000000 T\n"])
def test_a_kallsyms_listing_not_of_its_form_names_nothing(tmp_path, listing):
    path = tmp_path / "kallsyms"
    path.write_bytes(listing)
    assert kallsyms.read(str(path)) is None


# ---------------------------------------------------------------------------
# a phase's top functions (live.phase_functions): kernel addresses named last


def _intervals(phases: list[int], samples: list[int]):
    from phasewatch.core.pipeline import Intervals
    n = len(phases)
    zeros = np.zeros(n)
    return Intervals(index=np.arange(n), t_start_ns=np.arange(n), t_end_ns=np.arange(n) + 1,
                     instructions=zeros, cycles=zeros, samples=np.array(samples),
                     distance=zeros, phase=np.array(phases), new_phase=np.zeros(n, bool),
                     voltage_mv=zeros, pfreq_mhz=zeros)


def _fed(symbolizer, ips: np.ndarray, phases: list[int], samples: list[int], fold_at=65536):
    from phasewatch.live.phase_functions import PhaseFunctions
    functions = PhaseFunctions(symbolizer, fold_at=fold_at)
    functions.batch({"ip": ips})
    functions.add(_intervals(phases, samples))
    return functions


def _reference_top(symbolizer, ips: np.ndarray, k: int) -> list[tuple[str, float]]:
    """Every address named at once, then ranked (the ranking before kernel
    addresses waited)."""
    from collections import Counter
    counts = Counter(symbolizer.names(ips, offsets=False).tolist())
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:k]
    return [(name, n / len(ips)) for name, n in ranked]


@pytest.fixture
def kallsyms_reads(monkeypatch):
    """How often the kernel's symbols are asked for while naming samples."""
    from phasewatch.live import symbolizer as symbolizer_module
    calls = []
    real = kallsyms.running_kernel

    def counted():
        calls.append(1)
        return real()
    monkeypatch.setattr(symbolizer_module.kallsyms, "running_kernel", counted)
    return calls


def _kernel_ip(i: int = 0) -> int:
    symbols = kallsyms.read()
    return int(symbols.starts[1000 + i]) + 1 if symbols is not None else 0xFFFF_FFFF_8100_0000 + i


def test_kernel_samples_below_the_top_functions_are_not_named(abab, kallsyms_reads):
    """Three user functions outrank every kernel function possible (3 kernel
    samples against the third's 4): /proc/kallsyms is not read, and the
    shares are those of naming everything (the kernel's samples count in
    the total)."""
    with RunningAbab(abab, "5") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        a, b, c = (run.addrs[n] for n in ("region_a", "region_b", "main"))
        ips = np.array([a] * 6 + [b] * 5 + [c] * 4 + [_kernel_ip(0)] * 2 + [_kernel_ip(1)],
                       dtype=np.uint64)
        functions = _fed(symbolizer, ips, [7], [len(ips)])
        top = functions.top(7, 3)
        assert kallsyms_reads == []
        assert top == _reference_top(symbolizer, ips, 3)
        assert functions.kernel_share(7) == pytest.approx(3 / 18)


@pytest.mark.parametrize("kernel_samples,k", [(4, 3), (5, 3), (1, 4), (9, 1)])
def test_kernel_samples_that_could_rank_are_named(abab, kallsyms_reads, kernel_samples, k):
    """As many kernel samples as the k-th user function has (a tie, broken
    by name), more, or fewer user functions than k: the kernel's addresses
    are named and ranked as if named from the start."""
    with RunningAbab(abab, "5") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        a, b, c = (run.addrs[n] for n in ("region_a", "region_b", "main"))
        ips = np.array([a] * 6 + [b] * 5 + [c] * 4 + [_kernel_ip(0)] * kernel_samples,
                       dtype=np.uint64)
        functions = _fed(symbolizer, ips, [7], [len(ips)])
        top = functions.top(7, k)
        assert kallsyms_reads != []
        assert top == _reference_top(symbolizer, ips, k)


def test_kernel_samples_are_named_once_they_reach_the_fold(abab, kallsyms_reads):
    """Waiting kernel addresses are bounded like the rest: at ``fold_at``
    they are named, and later ones of the phase join the same counts."""
    with RunningAbab(abab, "5") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        a = run.addrs["region_a"]
        first = np.array([a] * 30 + [_kernel_ip(0)] * 8, dtype=np.uint64)
        functions = _fed(symbolizer, first, [3], [len(first)], fold_at=8)
        assert kallsyms_reads != []
        assert functions._waiting(3) == 0
        second = np.array([_kernel_ip(0)] * 2 + [a] * 10, dtype=np.uint64)
        functions.batch({"ip": second})
        functions.add(_intervals([3], [len(second)]))
        everything = np.concatenate([first, second])
        assert functions.top(3, 2) == _reference_top(symbolizer, everything, 2)
        assert functions.top(3, 1) == [(_reference_top(symbolizer, everything, 1)[0][0], 40 / 50)]


@pytest.mark.parametrize("a_samples,b_samples,kernel_samples", [(9, 1, 2), (3, 2, 2)])
def test_a_phase_is_named_without_the_kernel_where_one_function_dominates(
        abab, kallsyms_reads, a_samples, b_samples, kernel_samples):
    """A phase's name needs its second function only where the first holds
    under half its samples: with one function dominating, kernel samples that
    could be second are not named; without, they are.  The name is that of
    everything named at once either way."""
    from phasewatch.live.phase_catalog import name_phases, phase_name
    with RunningAbab(abab, "5") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        a, b = run.addrs["region_a"], run.addrs["region_b"]
        ips = np.array([a] * a_samples + [b] * b_samples + [_kernel_ip(0)] * kernel_samples,
                       dtype=np.uint64)
        functions = _fed(symbolizer, ips, [7], [len(ips)])
        names = name_phases([7], functions, {})
        assert (kallsyms_reads != []) == (a_samples / len(ips) < 0.5)
        assert names == {7: phase_name(_reference_top(symbolizer, ips, 2))}


@pytest.mark.parametrize("kernel_samples", [1, 2])
def test_kernel_samples_under_the_share_a_table_shows_are_not_named(
        abab, kallsyms_reads, kernel_samples):
    """A table shows no function under half a per cent: kernel samples that
    together hold less are not named for it (1 of 301), and where they hold
    more (2 of 202) they are, ranked as if named from the start."""
    with RunningAbab(abab, "5") as run:
        symbolizer = Symbolizer.from_pid(run.pid)
        a = run.addrs["region_a"]
        user = 300 if kernel_samples == 1 else 200
        ips = np.array([a] * user + [_kernel_ip(0)] * kernel_samples, dtype=np.uint64)
        functions = _fed(symbolizer, ips, [7], [len(ips)])
        top = functions.top(7, 3, min_share=0.005)
        assert (kallsyms_reads != []) == (kernel_samples / len(ips) >= 0.005)
        reference = _reference_top(symbolizer, ips, 3)
        assert top == [(name, share) for name, share in reference
                       if share >= 0.005 or not name.startswith("[k")]
