"""Build the ahead-of-time kernel module: ``python -m phasewatch.cli.aot_build``.

The kernels are first run just in time over a small workload that takes the
paths users take (replay of a trace file with every detector and interval
kind, in-memory batches as live runs feed them, one CPU and several), so that
each kernel's argument types are the ones real calls use.  Each kernel called
from Python is then exported once per argument-type combination seen, through
a wrapper that calls numba's own dispatcher (keeping each kernel's options:
fastmath, error model, inlining), and numba.pycc compiles them all into
``phasewatch/core/_kernels_aot``, with a manifest naming each export and the
sources and the x86-64 level it was built for (agent/core/kernels.py reads it).
The register sampler's tick loop (collectors/tick_loop.c) is compiled too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from ..core import detectors, kernels

DETECTORS = detectors.SAMPLE_DETECTORS
INTERVALS = (["--interval-instructions", "20000000"], ["--interval-ms", "5"],
             ["--interval-samples", "40"])


def forget_jit_cache(package: Path) -> None:
    """Remove numba's on-disk cache of the package's kernels.  numba keys a
    kernel's cache on its own file only, so a kernel whose callee in another
    file changed (classify.py calling histograms.py) would otherwise be
    loaded stale from the cache and compiled into the module as it was."""
    for cached in itertools.chain(package.rglob("__pycache__/*.nbi"),
                                  package.rglob("__pycache__/*.nbc")):
        with contextlib.suppress(OSError):
            cached.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m phasewatch.cli.aot_build", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=kernels.package_dir(),
                    help="folder for the module and its manifest (default: the package's)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    build_tick_loop(args.quiet)
    t0 = time.monotonic()
    forget_jit_cache(kernels.package_dir().parent)
    kernels.record_calls()
    with tempfile.TemporaryDirectory(prefix="phasewatch-aot-") as tmp:
        workload(Path(tmp))
    exports = collect_exports()
    try:
        compile_module(exports, args.out)
    except (ImportError, OSError, distutils_errors()) as exc:
        print(f"phasewatch: kernels not compiled ahead of time ({exc}); they will run "
              f"just in time, with a slower start", file=sys.stderr)
        return 0
    if not args.quiet:
        print(f"phasewatch: {len(exports)} kernel entries compiled ahead of time into "
              f"{args.out / kernels.AOT_MODULE} in {time.monotonic() - t0:.0f} s")
    return 0


def build_tick_loop(quiet: bool) -> None:
    """The register sampler's compiled tick loop (phasewatch.collectors.tick_loop)."""
    from ..collectors import tick_loop
    try:
        path = tick_loop.build()
    except OSError as exc:
        print(f"phasewatch: the register sampler's tick loop not compiled ({exc}); it will "
              f"tick in Python, at a lower rate", file=sys.stderr)
        return
    if not quiet:
        print(f"phasewatch: the register sampler's tick loop compiled into {path}")


def workload(tmp: Path) -> None:
    """Calls of every kernel the pipeline, the results writer and the report make."""
    from ..core.classify import threshold_history
    from ..core.params import DetectorParams
    from ..formats import synthetic

    traces = []
    for cpus in (1, 2):
        traces.append(tmp / f"cpus{cpus}.arrow")
        write_trace(traces[-1], in_memory_batches(cpus), cpus)
    for trace in traces:
        for detector in DETECTORS:
            for interval in INTERVALS:
                for adaptive in ([], ["--adaptive"]):
                    replay([str(trace), "--detector", detector, *interval, *adaptive,
                            "--output", str(tmp / "r.jsonl")])
    for detector in DETECTORS:
        for cpus in (1, 2):
            for scope in ("cpu", "thread"):
                feed_pipeline(in_memory_batches(cpus), detector, scope)
    threshold_history(np.array([np.nan, 0.1, 0.2]), np.array([True, False, False]),
                      DetectorParams(adaptive=True))
    synthetic.labels()
    predictions()


def predictions() -> None:
    """The predictor's calls beyond the tap's in replay: a phase forgotten,
    memory seeded, one interval at a time, a results file's text in CSV."""
    from ..core.predict import PhasePredictor
    from ..core.prediction import PredictionScore
    from ..formats.results import csv_lines, json_lines

    first = PhasePredictor()
    phases = np.array([0, 0, 1, 1, 0, 0, 2, -1, 2, 0], np.int64)
    times = np.zeros(len(phases), np.int64)
    said = first.observe_block(phases, np.zeros(len(phases), np.bool_), times, times.copy())
    PredictionScore().add(phases, said)
    second = PhasePredictor()
    second.seed(first.memory_dict(), [0, 1, 2])
    second.observe(1)
    second.forget(2)
    second.retain([0])
    iv = _intervals(phases)
    iv.prediction = said
    csv_lines(iv)
    json_lines(iv)


def _intervals(phases: np.ndarray):
    from ..core.pipeline import Intervals
    n = len(phases)
    z = np.zeros(n, np.int64)
    return Intervals(np.arange(n), z, z + 1, z, z, z, np.zeros(n), phases, np.zeros(n, bool),
                     np.zeros(n), np.zeros(n))


def replay(argv: list[str]) -> None:
    from . import main as cli
    with contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(["replay", *argv])
    if status != 0:
        raise RuntimeError(f"the build's workload failed: phasewatch replay {' '.join(argv)}")


def in_memory_batches(cpus: int) -> list:
    """Synthetic batches of ``cpus`` CPUs interleaved, as a live source gives them."""
    from ..core.batch import SampleBatch, concat
    from ..formats import synthetic

    schedule = synthetic.SCHEDULE[:4]
    streams = []
    for cpu in range(cpus):
        one = concat(list(synthetic.generate(schedule, 20_000_000, seed=3 + cpu, tid=100 + cpu)))
        streams.append(SampleBatch({**one.columns, "cpu": np.full(len(one), cpu, np.int32)}))
    both = concat(streams)
    order = np.argsort(both["t_ns"], kind="stable")
    both = SampleBatch({n: c[order] for n, c in both.columns.items()})
    # Sizes that shrink and grow, as a live source's do: the work arrays are
    # then whole (C layout) or cut (A layout), and both calls are exported.
    cuts, start = [], 0
    for size in itertools.cycle((4096, 1500, 40000, 700)):
        if start >= len(both):
            return cuts
        cuts.append(both.slice(start, start + size))
        start += size


def write_trace(path: Path, batches: list, cpus: int) -> None:
    from ..formats import synthetic
    from ..formats.trace import TraceWriter

    with TraceWriter(str(path), synthetic.metadata(20_000_000, cpus=cpus), batches[0].signals) as w:
        for b in batches:
            w.write(b)


def feed_pipeline(batches: list, detector: str, scope: str) -> None:
    from ..core.driver import Driver
    from ..core.params import DetectorParams, IntervalParams, Params, histogram_params_of
    from ..core.pipeline import Pipeline
    from ..formats import synthetic
    from ..formats.results import ResultsSink

    meta = {**synthetic.metadata(20_000_000), "counter_scope": scope}
    params = Params(interval=IntervalParams(instructions=20_000_000),
                    histograms=histogram_params_of(meta), detector=DetectorParams(detector=detector))
    pipe = Pipeline.for_trace(meta, params)
    driver = Driver(pipe, [ResultsSink(io.StringIO())])
    driver.run(batches)
    driver.finish()
    pipe.keep_profiles()
    driver.run(batches[:2])


def collect_exports() -> list[tuple[str, str, object]]:
    """(kernel name, export name, numba signature) of each call type seen."""
    exports = []
    for name, k in sorted(kernels.REGISTRY.items()):
        short = name.rsplit(".", 2)[-2] + "__" + k.py_func.__name__
        for i, argtypes in enumerate(sorted(k.seen, key=str)):
            exports.append((name, f"{short}__{i}", k.dispatcher.overloads[argtypes].signature))
    return exports


def distutils_errors() -> type:
    """The error numba.pycc raises when the C compiler fails."""
    try:
        from distutils.errors import CCompilerError
    except ImportError:
        return OSError
    return CCompilerError


def compile_module(exports, out: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # numba.pycc's pending-deprecation notice
        from numba.pycc import CC
    cc = CC(kernels.AOT_MODULE)
    cc.output_dir = str(out)
    level = kernels.cpu_level(kernels.cpu_flags()) if platform.machine() == "x86_64" else ""
    cc.target_cpu = level
    manifest_rows: dict[str, list] = {}
    for name, export, sig in exports:
        cc.export(export, sig)(_wrapper(kernels.REGISTRY[name], len(sig.args)))
        key = [kernels.numba_key(t) for t in sig.args]
        manifest_rows.setdefault(name, []).append([key, export])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cc.compile()
    manifest = {"numpy": np.__version__, "cpu": level, "sources": kernels.source_hash(),
                "stamps": kernels.source_stamps(), "kernels": manifest_rows}
    tmp = out / (kernels.MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, out / kernels.MANIFEST)


def _wrapper(k: "kernels.Kernel", n_args: int):
    """A function of ``n_args`` arguments that calls the kernel's dispatcher."""
    names = ", ".join(f"a{i}" for i in range(n_args))
    scope = {"target": k.dispatcher}
    exec(f"def entry({names}):\n    return target({names})\n", scope)
    return scope["entry"]


if __name__ == "__main__":
    sys.exit(main())
