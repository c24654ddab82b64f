"""The pipeline's compiled kernels: ahead of time where built, else numba's JIT.

Every kernel is a plain Python function marked ``@kernel(...)`` with numba's
options.  ``python -m phasewatch.cli.aot_build`` (run by ``make install``) compiles
each kernel the way the pipeline calls it into one extension module,
``phasewatch/core/_kernels_aot``, with numba's ahead-of-time compiler.  A process
that finds that module, built from the sources it is running, calls into it and
never imports numba: start-up costs no compiler, no cache and no type
inference.  A call the module has no entry for (arguments of other types),
a stale or missing module, or ``PHASEWATCH_KERNELS=jit`` takes numba's JIT
instead, with its on-disk cache; results are the same either way.

``PHASEWATCH_KERNELS=aot`` makes a missing entry an error, for the tests that
prove the common paths never need the JIT.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

import numpy as np

AOT_MODULE = "_kernels_aot"
MANIFEST = AOT_MODULE + ".json"
_ENV = "PHASEWATCH_KERNELS"

#: Every kernel defined, by qualified name.
REGISTRY: dict[str, "Kernel"] = {}


class Kernel:
    """A numba-compiled function, compiled on first use (or taken from the
    ahead-of-time module).  Inside other kernels it is numba's dispatcher."""

    def __init__(self, func, options: dict):
        self.py_func = func
        self.targetoptions = options       # read by numba's inliner, like a dispatcher's
        self.name = f"{func.__module__}.{func.__qualname__}"
        self.__doc__, self.__name__, self.__module__ = func.__doc__, func.__name__, func.__module__
        self._dispatcher = None
        self._aot: dict | None = None
        #: Argument types of the calls made from Python, recorded while building.
        self.seen: set = set()
        REGISTRY[self.name] = self

    @property
    def dispatcher(self):
        if self._dispatcher is None:
            with _jit_lock:     # the daemon's pipelines run in threads: one imports numba
                if self._dispatcher is None:
                    self._dispatcher = self._jit()
        return self._dispatcher

    def _jit(self):
        njit = _numba().njit
        try:
            return njit(**self.targetoptions)(self.py_func)
        except RuntimeError as exc:
            # No folder to cache in (the sources' own not writable, and no
            # home, as for a system user): compiled afresh in each process.
            if "cannot cache" not in str(exc):
                raise
            return njit(**{**self.targetoptions, "cache": False})(self.py_func)

    def __call__(self, *args):
        return self.entry(*args)(*args)

    def entry(self, *args):
        """What a call with ``args`` runs: the ahead-of-time entry for their
        types, else numba's dispatcher."""
        aot = self._aot if self._aot is not None else self._load_aot()
        if aot:
            found = aot.get(call_key(args))
            if found is not None:
                return found
            if _mode() == "aot":
                raise RuntimeError(f"no ahead-of-time entry for {self.name}{call_key(args)}")
        if _recording:
            self.seen.add(tuple(_numba().typeof(a) for a in args))
        return self.dispatcher

    def fixed(self) -> "FixedCall":
        """The kernel for a caller whose arguments are of the same types at
        every call: the types are worked out at the first call only (a few
        microseconds a call, which weigh where a call's work is small)."""
        return FixedCall(self)

    def _load_aot(self) -> dict:
        entries = aot_entries().get(self.name, [])
        self._aot = {tuple(tuple(k) if isinstance(k, list) else k for k in key): fn
                     for key, fn in entries}
        return self._aot


class FixedCall:
    """A kernel called with arguments of unchanging types (Kernel.fixed)."""

    __slots__ = ("kernel", "run")

    def __init__(self, k: Kernel):
        self.kernel = k
        self.run = None

    def __call__(self, *args):
        if self.run is None:
            self.run = self.kernel.entry(*args)
        return self.run(*args)


def kernel(**options):
    """``@kernel(cache=True, nogil=True, ...)``: numba.njit's options."""
    return lambda func: Kernel(func, options)


def call_key(args) -> tuple:
    """The types numba would give ``args``, as plain values: an array's dtype
    character, dimensions and flags (layout, writability); a scalar's type
    name."""
    return tuple([_arg_key(a) for a in args])


_SCALARS = {bool: "bool", int: "int64", float: "float64"}
# numpy's array flag bits, and those of them numba's array types tell apart
# (numba types every array as aligned).
_C, _F, _WRITEABLE = 0x1, 0x2, 0x400
_TYPED_FLAGS = _C | _F | _WRITEABLE


def _arg_key(a):
    if type(a) is np.ndarray:
        f = a.flags.num & _TYPED_FLAGS
        return (a.dtype.char, a.ndim, f & ~_F if f & _C else f)   # numba: C before F
    name = _SCALARS.get(type(a))
    if name is None and isinstance(a, np.generic):
        name = _SCALARS[type(a)] = str(a.dtype)
    return name or repr(type(a))


def numba_key(ty) -> tuple | str:
    """``_arg_key`` of a numba type."""
    if hasattr(ty, "ndim") and hasattr(ty, "layout"):
        flags = {"C": _C, "F": _F, "A": 0}[ty.layout] | (_WRITEABLE if ty.mutable else 0)
        return (np.dtype(str(ty.dtype)).char, ty.ndim, flags)
    return str(ty)


# -- the ahead-of-time module -------------------------------------------------

_X86_64_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})
#: x86-64 micro-architecture levels the module is built for, best first, with
#: the /proc/cpuinfo flags each needs.  The JIT targets the host's own
#: features; the generic x86-64 of an ahead-of-time build vectorises less.
CPU_LEVELS = {
    "x86-64-v3": _X86_64_V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe",
                               "xsave"},
    "x86-64-v2": _X86_64_V2,
}


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first CPU's feature flags (empty where there are none to read)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def cpu_level(flags: frozenset[str]) -> str:
    """The best level in CPU_LEVELS these flags allow; "" (generic) if none."""
    return next((level for level, needs in CPU_LEVELS.items() if needs <= flags), "")

_entries: dict | None = None
_status = "not loaded yet"
_recording = False


def _mode() -> str:
    return os.environ.get(_ENV, "auto")


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def sources() -> list[tuple[str, str]]:
    """(path in its package folder, path) of each of the package's Python
    sources, in the order they are hashed."""
    found = []
    for package in ("phasewatch", "phasewatch.collectors"):
        folder = importlib.util.find_spec(package).submodule_search_locations[0]
        rows = [(os.path.relpath(os.path.join(root, name), folder), os.path.join(root, name))
                for root, _, names in os.walk(folder) for name in names if name.endswith(".py")]
        found += sorted(rows, key=lambda row: row[0].split(os.sep))
    return found


def source_hash() -> str:
    """SHA-256 over the package's Python sources.  Kernels read constants from
    many modules, so any change of source counts: the module is then rebuilt
    (make install) or the JIT used."""
    import hashlib
    digest = hashlib.sha256()
    for relative, path in sources():
        with open(path, "rb") as f:
            digest.update(relative.encode() + b"\0" + f.read())
    return digest.hexdigest()


def source_stamps() -> list[list]:
    """Each source's path, size and modification time: where all are as the
    build found them, the sources are the ones it was built from, and reading
    them all for their hash (5 ms of every start) is left out."""
    stamps = []
    for relative, path in sources():
        stat = os.stat(path)
        stamps.append([relative, stat.st_size, stat.st_mtime_ns])
    return stamps


def built_from_these_sources(index: dict) -> bool:
    return index.get("stamps") == source_stamps() or index.get("sources") == source_hash()


def aot_entries() -> dict:
    """Kernel name -> [(argument key, compiled function)], empty (with the
    reason in ``status()``) when the module is missing, stale or turned off."""
    global _entries, _status
    if _entries is None:
        _entries, _status = _load()
    return _entries


def status() -> str:
    """How kernels run in this process, in a few words."""
    aot_entries()
    return _status


def _load() -> tuple[dict, str]:
    if _mode() == "jit":
        return {}, f"just-in-time ({_ENV}=jit)"
    manifest = package_dir() / MANIFEST
    try:
        index = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return {}, "just-in-time: no ahead-of-time module (make install builds it)"
    if index.get("numpy") != np.__version__:
        return {}, f"just-in-time: the ahead-of-time module was built for numpy {index.get('numpy')}"
    missing = CPU_LEVELS.get(index.get("cpu"), frozenset()) - cpu_flags()
    if missing:
        return {}, (f"just-in-time: the ahead-of-time module was built for {index['cpu']}, and "
                    f"this CPU lacks {', '.join(sorted(missing))} (make install rebuilds it)")
    if not built_from_these_sources(index):
        return {}, "just-in-time: the ahead-of-time module is older than the sources (make install)"
    try:
        module = importlib.import_module(f"{__package__}.{AOT_MODULE}")
    except ImportError as e:
        return {}, f"just-in-time: the ahead-of-time module does not load ({e})"
    entries = {name: [(key, getattr(module, export)) for key, export in rows]
               for name, rows in index["kernels"].items()}
    return entries, (f"ahead-of-time ({sum(map(len, entries.values()))} entries, "
                     f"{index.get('cpu') or 'generic CPU'})")


# -- numba, when it is needed -------------------------------------------------

_numba_ready = False
_jit_lock = threading.RLock()


def _numba():
    global _numba_ready
    if not _numba_ready:
        _skip_blas_probe()
        _register_kernel_type()
        _numba_ready = True
    import numba
    return numba


def _register_kernel_type() -> None:
    """Let numba type a ``Kernel`` global inside another kernel as its dispatcher."""
    from numba.core import types
    from numba.extending import typeof_impl

    @typeof_impl.register(Kernel)
    def _typeof_kernel(val, c):
        return types.Dispatcher(val.dispatcher)


def _skip_blas_probe() -> None:
    """numba probes for a BLAS by importing ``scipy.linalg``: a third to a half
    of a second, for linear algebra no kernel here uses.  Let the probe fail at
    once, unless scipy.linalg is in already; it stays importable."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    sys.modules["scipy.linalg"] = None
    try:
        import numba.np.arraymath  # noqa: F401  (where the probe runs)
    finally:
        del sys.modules["scipy.linalg"]


def record_calls() -> None:
    """From now on, remember the argument types of every call from Python
    (for the ahead-of-time build); calls take the JIT."""
    global _recording, _entries, _status
    _recording = True
    _entries, _status = {}, "just-in-time: recording calls for the ahead-of-time build"
    for k in REGISTRY.values():
        k._aot = None
