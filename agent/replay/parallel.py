"""Replay of many streams at once, one process per usable CPU.

Traces are independent streams, and so are the CPUs of one trace with
``--per-cpu``.  Each stream is replayed whole by one worker, by the very code
that replays a single trace (:func:`.trace.replay`); the results come back
in the order of the traces and CPUs.  Workers are forked, so they start with
the modules imported and pay only the loading of the kernels.  With
``--per-cpu`` each worker reads the whole trace and keeps its CPU's rows.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from ..errors import UserError
from ..formats.outputs import Recording, check_outputs
from .trace import ReplayOptions, Replayed, replay


def replay_many(traces: list[str], options: ReplayOptions, warn, *, per_cpu: bool,
                jobs: int | None) -> list[tuple[str, int | None, Replayed | None, str | None]]:
    """Replay ``traces`` (each CPU's samples apart with ``per_cpu``): per
    stream, (trace, CPU or None, what it found or None, the error if it failed)."""
    if options.labels:
        raise UserError("--labels goes with one trace: replay that trace alone")
    jobs = jobs or len(os.sched_getaffinity(0))
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give at least 1")
    streams = [(trace, cpu) for trace in traces
               for cpu in (cpus_of(trace, options, warn) if per_cpu else [None])]
    names = [(name_of(trace) if cpu is None else f"{name_of(trace)}.cpu{cpu}")
             for trace, cpu in streams]
    outputs = output_paths(options.output, names)
    check_outputs(outputs, [Recording(trace) for trace in traces] + [options.labels])
    work = [(trace, replace(options, output=out), warn, cpu)
            for (trace, cpu), out in zip(streams, outputs)]
    with ProcessPoolExecutor(max_workers=min(jobs, len(work)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        results = list(pool.map(replay_caught, work))
    return [(trace, cpu, found, error) for (trace, cpu), (found, error) in zip(streams, results)]


def name_of(trace: str) -> str:
    return os.path.splitext(os.path.basename(trace))[0]


def cpus_of(trace: str, options: ReplayOptions, warn) -> list[int]:
    """The CPUs whose samples ``trace`` holds, ascending."""
    import numpy as np

    from ..formats.tracefiles import open_trace
    source = open_trace(trace, base_mhz=options.base_mhz, warn=warn)
    try:
        seen = np.zeros(0, np.int32)
        for batch in source.batches():
            seen = np.union1d(seen, np.unique(batch["cpu"]))
    finally:
        source.close()
    return [int(c) for c in seen]


def output_paths(folder: str | None, names: list[str]) -> list[str | None]:
    """``FOLDER/<name>.jsonl`` for each stream, or None without --output."""
    if not folder:
        return [None] * len(names)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UserError(f"--output {folder}: with several traces, a folder of them or --per-cpu, "
                        f"give a folder for their results")
    os.makedirs(folder, exist_ok=True)
    if len(set(names)) < len(names):
        raise UserError("two traces share a name, so their results would share a file: "
                        "rename one, or replay them separately")
    return [os.path.join(folder, name + ".jsonl") for name in names]


def replay_caught(job) -> tuple[Replayed | None, str | None]:
    """Replay one stream in a worker: (what it found, None), or (None, the error)."""
    trace, options, warn, cpu = job
    try:
        return replay(trace, options, warn, cpu), None
    except UserError as exc:
        return None, str(exc)
