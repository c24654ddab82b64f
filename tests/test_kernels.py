"""Kernels compiled ahead of time: built by ``make install``, taken by the
commands users run (which then never import numba), and equal to the JIT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from phasewatch.core import histograms, kernels

BIN = Path(sys.executable).parent / "phasewatch"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "synthetic-skylake.csv"
#: Runs a phasewatch command, then says whether numba was imported.
PROBE = ("import sys\nfrom phasewatch.cli import main as cli\nstatus = cli.main(sys.argv[1:])\n"
         "print('numba imported:', 'numba' in sys.modules)\nsys.exit(status)\n")


def phasewatch(mode: str, *argv) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", PROBE, *map(str, argv)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PHASEWATCH_KERNELS": mode})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def example_trace(tmp_path_factory) -> Path:
    trace = tmp_path_factory.mktemp("aot") / "example.arrow"
    subprocess.run([str(BIN), "convert", str(EXAMPLE), str(trace)], check=True, capture_output=True)
    return trace


def test_the_module_is_built_from_these_sources():
    assert kernels.status().startswith("ahead-of-time"), kernels.status()


@pytest.mark.parametrize("detector", ["vpf", "vpf-ip", "vpf-ip-fold"])
@pytest.mark.parametrize("interval", [[], ["--interval-samples", "50"], ["--adaptive"]])
def test_replay_needs_no_jit_and_writes_what_the_jit_writes(example_trace, tmp_path, detector, interval):
    outputs = {}
    for mode in ("aot", "jit"):
        outputs[mode] = tmp_path / f"{mode}.jsonl"
        proc = phasewatch(mode, "replay", example_trace, "--detector", detector, *interval,
                          "--output", outputs[mode])
        assert proc.stdout.splitlines()[-1] == f"numba imported: {mode == 'jit'}"
    aot, jit = outputs["aot"].read_bytes(), outputs["jit"].read_bytes()
    assert len(aot.splitlines()) >= 150
    assert aot == jit


def test_run_needs_no_jit(abab, tmp_path):
    proc = phasewatch("aot", "run", "--json", tmp_path / "s.json", "--detector", "vpf-ip",
                      "--record", tmp_path / "t.arrow", "--output", tmp_path / "r.jsonl", "--",
                      abab, "0.3")
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["samples"] > 500 and summary["intervals"] >= 3
    assert proc.stdout.splitlines()[-1] == "numba imported: False"


def test_call_keys_are_the_types_numba_gives():
    import numba
    a = np.arange(24.0).reshape(4, 6)
    readonly = np.frombuffer(np.arange(5, dtype=np.uint64).tobytes(), np.uint64)
    unaligned = np.frombuffer(b"\0" + bytes(64), np.int64, count=8, offset=1)
    values = [a, a[:, :3], a.T, a[::2], a[0], readonly, unaligned, np.zeros((1, 5), np.int32),
              np.zeros(0, np.bool_), True, 7, 2.5, np.uint64(3), np.int32(4), np.float64(1), np.bool_(0)]
    for v in values:
        assert kernels.call_key([v]) == (kernels.numba_key(numba.typeof(v)),), v


def test_arguments_of_another_type_take_the_jit_and_are_right(monkeypatch):
    values = np.array([0.5, 2.5, np.nan, 9.0], np.float32)     # float64 is what the pipeline passes
    out = np.empty(4, np.int32)
    histograms.value_bins(values, 0.0, 4.0, 4, out)
    assert list(out) == [0, 2, -1, 3]
    monkeypatch.setenv("PHASEWATCH_KERNELS", "aot")
    with pytest.raises(RuntimeError, match="no ahead-of-time entry for phasewatch.core.histograms.value_bins"):
        histograms.value_bins(values, 0.0, 4.0, 4, out)


def test_a_module_built_from_other_sources_is_not_used(monkeypatch, tmp_path):
    monkeypatch.delenv("PHASEWATCH_KERNELS", raising=False)     # the module, not the JIT asked for
    index = json.loads((kernels.package_dir() / kernels.MANIFEST).read_text())
    (tmp_path / kernels.MANIFEST).write_text(json.dumps({**index, "sources": "0" * 64,
                                                         "stamps": []}))
    monkeypatch.setattr(kernels, "package_dir", lambda: tmp_path)
    entries, status = kernels._load()
    assert entries == {} and "older than the sources" in status
    (tmp_path / kernels.MANIFEST).write_text(json.dumps({**index, "cpu": "x86-64-v3"}))
    monkeypatch.setattr(kernels, "cpu_flags", lambda: kernels.CPU_LEVELS["x86-64-v2"])
    entries, status = kernels._load()
    assert entries == {} and "built for x86-64-v3" in status and "lacks abm, avx, avx2," in status
    (tmp_path / kernels.MANIFEST).unlink()
    entries, status = kernels._load()
    assert entries == {} and "make install builds it" in status


def test_the_build_targets_the_best_level_the_cpu_has():
    v2, v3 = kernels.CPU_LEVELS["x86-64-v2"], kernels.CPU_LEVELS["x86-64-v3"]
    assert kernels.cpu_level(v3 | {"avx512f"}) == "x86-64-v3"
    assert kernels.cpu_level(v3 - {"fma"}) == "x86-64-v2"
    assert kernels.cpu_level(v2 - {"popcnt"}) == ""
    assert kernels.cpu_level(frozenset()) == ""


def test_the_build_forgets_numbas_cache_of_the_package(tmp_path):
    from phasewatch.cli.aot_build import forget_jit_cache
    cache = tmp_path / "core" / "__pycache__"
    cache.mkdir(parents=True)
    stale = [cache / "classify._join-125.py311.1.nbc", cache / "classify._join-125.py311.nbi"]
    kept = [cache / "classify.cpython-311.pyc", tmp_path / "core" / "notes.nbc"]
    for path in stale + kept:
        path.write_bytes(b"x")
    forget_jit_cache(tmp_path)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept)


def test_sources_as_built_are_known_by_their_stamps_and_else_by_their_hash(monkeypatch, tmp_path):
    monkeypatch.delenv("PHASEWATCH_KERNELS", raising=False)     # the module, not the JIT asked for
    index = json.loads((kernels.package_dir() / kernels.MANIFEST).read_text())
    assert index["stamps"] == kernels.source_stamps()
    monkeypatch.setattr(kernels, "package_dir", lambda: tmp_path)
    touched = [[path, size, mtime + 1] for path, size, mtime in index["stamps"]]
    (tmp_path / kernels.MANIFEST).write_text(json.dumps({**index, "stamps": touched}))
    hashed = []
    monkeypatch.setattr(kernels, "source_hash", lambda: hashed.append(1) or index["sources"])
    assert kernels._load()[0] != {} and hashed == [1]      # touched, same text: still taken
    (tmp_path / kernels.MANIFEST).write_text(json.dumps({**index, "sources": "0" * 64}))
    assert kernels._load()[0] != {} and hashed == [1]      # as built: not read at all


def test_the_cpu_flags_are_the_first_cpus(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse4_2 avx2\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert kernels.cpu_flags(str(cpuinfo)) == {"fpu", "sse4_2", "avx2"}
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd\n")      # no flags line
    assert kernels.cpu_flags(str(cpuinfo)) == frozenset()
    assert kernels.cpu_flags(str(tmp_path / "none")) == frozenset()


def test_keys_of_what_numba_types_by_class_and_the_numpy_flags():
    # numpy's flag bits: C-contiguous 0x1, F-contiguous 0x2, writeable 0x400
    a = np.zeros((2, 3))
    assert kernels.call_key([a, a.T, a[:, ::2], a[0]]) == (
        ("d", 2, 0x401), ("d", 2, 0x402), ("d", 2, 0x400), ("d", 1, 0x401))
    a.flags.writeable = False
    assert kernels.call_key([a]) == (("d", 2, 0x1),)
    assert kernels.call_key([True, 3, 2.5, np.float32(1), np.int16(2), "s", None]) == (
        "bool", "int64", "float64", "float32", "int16", repr(str), repr(type(None)))


def test_recorded_calls_are_the_argument_types_and_take_the_jit(monkeypatch):
    monkeypatch.setattr(kernels, "_recording", False)
    monkeypatch.setattr(kernels, "_entries", None)
    monkeypatch.setattr(kernels, "_status", kernels._status)     # the status after it, as before
    monkeypatch.setattr(histograms.value_bins, "seen", set())
    kernels.record_calls()
    try:
        assert kernels.status() == "just-in-time: recording calls for the ahead-of-time build"
        out = np.empty(3, np.int32)
        histograms.value_bins(np.array([0.5, 1.5, 9.0]), 0.0, 2.0, 2, out)
        assert out.tolist() == [0, 1, 1]
        (types,) = histograms.value_bins.seen
        assert [str(t) for t in types] == ["array(float64, 1d, C)", "float64", "float64",
                                           "int64", "array(int32, 1d, C)"]
    finally:
        for k in kernels.REGISTRY.values():
            k._aot = None


def test_a_call_takes_the_compiled_entry_of_its_argument_types_else_the_jit(monkeypatch):
    calls = []

    def compiled(values, lo, hi, nbins, out):
        calls.append(len(values))
        out[:] = 7
    key = kernels.call_key([np.zeros(2), 0.0, 1.0, 2, np.zeros(2, np.int32)])
    monkeypatch.setattr(kernels, "aot_entries", lambda: {
        "phasewatch.core.histograms.value_bins": [([list(k) if isinstance(k, tuple) else k
                                                    for k in key], compiled)]})
    monkeypatch.setattr(histograms.value_bins, "_aot", None)
    out = np.empty(2, np.int32)
    histograms.value_bins(np.array([0.2, 0.7]), 0.0, 1.0, 2, out)   # the compiled entry
    assert calls == [2] and out.tolist() == [7, 7]
    histograms.value_bins(np.array([0.2, 0.7]), 0.0, 1.0, 2, out)   # kept, not loaded again
    assert calls == [2, 2]
    small = np.empty(2, np.int16)                                   # other types: the JIT
    histograms.value_bins(np.array([0.2, 0.7]), 0.0, 1.0, 2, small)
    assert calls == [2, 2] and small.tolist() == [0, 1]
    monkeypatch.setenv("PHASEWATCH_KERNELS", "aot")
    with pytest.raises(RuntimeError, match="no ahead-of-time entry"):
        histograms.value_bins(np.array([0.2, 0.7]), 0.0, 1.0, 2, small)


def test_flags_exactly_a_levels_are_that_level():
    for level, needs in kernels.CPU_LEVELS.items():
        assert kernels.cpu_level(frozenset(needs)) == level


def test_the_source_hash_covers_the_sources():
    import hashlib
    assert kernels.source_hash() != hashlib.sha256().hexdigest()


def test_read_only_arrays_of_every_layout_have_the_key_numba_gives():
    """Writability is a flag bit of its own: a read-only array is neither
    C- nor F-contiguous for that."""
    import numba
    a = np.zeros((3, 4))
    views = [a.T, a[:, ::2], a[0]]
    for v in views:
        v.flags.writeable = False
        assert kernels.call_key([v]) == (kernels.numba_key(numba.typeof(v)),), v.flags
    assert [kernels.call_key([v])[0][2] for v in views] == [0x2, 0x0, 0x1]


def write_manifest(monkeypatch, tmp_path, **fields) -> None:
    """An ahead-of-time manifest in ``tmp_path`` for sources whose stamps
    and hash are stand-ins; its one entry is a function of core.params."""
    monkeypatch.delenv("PHASEWATCH_KERNELS", raising=False)     # the module, not the JIT asked for
    monkeypatch.setattr(kernels, "package_dir", lambda: tmp_path)
    monkeypatch.setattr(kernels, "source_stamps", lambda: [["core/x.py", 10, 20]])
    monkeypatch.setattr(kernels, "source_hash", lambda: "a" * 64)
    monkeypatch.setattr(kernels, "cpu_flags", lambda: kernels.CPU_LEVELS["x86-64-v2"])
    monkeypatch.setattr(kernels, "AOT_MODULE", "params")
    index = {"numpy": np.__version__, "cpu": "", "stamps": [["core/x.py", 10, 20]],
             "sources": "a" * 64, "kernels": {"k": [[["d", 1, 0x401], "cpu_model_of"]]}}
    (tmp_path / kernels.MANIFEST).write_text(json.dumps({**index, **fields}))


def test_the_module_is_taken_where_either_its_stamps_or_its_hash_are_these_sources(
        monkeypatch, tmp_path):
    from phasewatch.core.params import cpu_model_of
    for fields in ({"sources": "0" * 64}, {"stamps": []}):
        write_manifest(monkeypatch, tmp_path, **fields)
        entries, status = kernels._load()
        assert entries == {"k": [(["d", 1, 0x401], cpu_model_of)]}
        assert status == "ahead-of-time (1 entries, generic CPU)"
    write_manifest(monkeypatch, tmp_path, stamps=[], sources="0" * 64)
    assert kernels._load() == ({}, "just-in-time: the ahead-of-time module is older than the "
                                   "sources (make install)")


def test_the_status_names_the_level_the_module_was_built_for(monkeypatch, tmp_path):
    write_manifest(monkeypatch, tmp_path, cpu="x86-64-v2")
    assert kernels._load()[1] == "ahead-of-time (1 entries, x86-64-v2)"


def test_a_module_that_does_not_load_leaves_the_jit(monkeypatch, tmp_path):
    write_manifest(monkeypatch, tmp_path)
    monkeypatch.setattr(kernels, "AOT_MODULE", "_no_such_kernels")
    entries, status = kernels._load()
    assert entries == {}
    assert status.startswith("just-in-time: the ahead-of-time module does not load (No module")


def test_a_kernel_numba_cannot_cache_is_compiled_without_its_cache(monkeypatch):
    """numba refuses ``cache=True`` where it finds no folder to write its
    cache to (a RuntimeError, "cannot cache function ..."); the kernel is then
    compiled with its other options and no cache.  As root here every folder
    is writable, so numba's njit is stood in for.  Another error of numba's
    is raised."""
    asked = []

    class Numba:
        @staticmethod
        def njit(**options):
            asked.append(options)
            if options.get("cache"):
                raise RuntimeError("cannot cache function 'f': no locator available for file 'f.py'")
            return lambda func: ("compiled", func)

    def f(x):
        return x
    monkeypatch.setattr(kernels, "REGISTRY", {})
    monkeypatch.setattr(kernels, "_numba", lambda: Numba)
    k = kernels.Kernel(f, {"cache": True, "nogil": True})
    assert k.dispatcher == ("compiled", f)
    assert asked == [{"cache": True, "nogil": True}, {"cache": False, "nogil": True}]

    class Failing:
        @staticmethod
        def njit(**options):
            raise RuntimeError("unsupported")
    monkeypatch.setattr(kernels, "_numba", lambda: Failing)
    with pytest.raises(RuntimeError, match="unsupported"):
        kernels.Kernel(f, {"cache": True})._jit()


def test_numba_types_a_kernel_inside_another_as_its_dispatcher():
    from numba.extending import typeof_impl
    kernels._numba()
    assert typeof_impl.dispatch(kernels.Kernel) is not typeof_impl.dispatch(object)


def python_says(code: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_numba_loads_without_probing_for_scipy_and_leaves_a_loaded_scipy_alone():
    check = ("import sys\nfrom phasewatch.core import kernels\nkernels._skip_blas_probe()\n"
             "print('numba.np.arraymath' in sys.modules, sys.modules.get('scipy.linalg') is S)\n")
    assert python_says("S = None\n" + check) == ["True", "True"]
    loaded = "import sys, types\nS = sys.modules['scipy.linalg'] = types.ModuleType('linalg')\n"
    assert python_says(loaded + check) == ["False", "True"]


def test_a_fixed_call_finds_its_kernel_once_and_gives_the_kernels_results():
    fixed = histograms.value_bins.fixed()
    out = np.empty(3, np.int32)
    fixed(np.array([0.5, 1.5, 9.0]), 0.0, 2.0, 2, out)
    assert out.tolist() == [0, 1, 1]
    first = fixed.run
    fixed(np.array([1.5, 0.2, np.nan]), 0.0, 2.0, 2, out)
    assert out.tolist() == [1, 0, -1] and fixed.run is first


def test_calls_are_recorded_only_when_asked(monkeypatch):
    monkeypatch.setattr(histograms.value_bins, "seen", set())
    out = np.empty(2, np.int16)                 # no compiled entry: the JIT
    histograms.value_bins(np.array([0.2, 0.7]), 0.0, 1.0, 2, out)
    assert out.tolist() == [0, 1] and histograms.value_bins.seen == set()


def test_recording_sets_the_compiled_entries_aside(monkeypatch):
    calls = []
    key = kernels.call_key([np.zeros(2), 0.0, 1.0, 2, np.zeros(2, np.int32)])
    monkeypatch.setattr(histograms.value_bins, "_aot", {key: lambda *args: calls.append(1)})
    monkeypatch.setattr(histograms.value_bins, "seen", set())
    monkeypatch.setattr(kernels, "_recording", False)
    monkeypatch.setattr(kernels, "_entries", None)
    monkeypatch.setattr(kernels, "_status", kernels._status)
    kernels.record_calls()
    try:
        out = np.empty(2, np.int32)
        histograms.value_bins(np.array([0.2, 0.7]), 0.0, 1.0, 2, out)
        assert calls == [] and out.tolist() == [0, 1]
        assert len(histograms.value_bins.seen) == 1
    finally:
        for k in kernels.REGISTRY.values():
            k._aot = None
