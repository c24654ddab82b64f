"""Replay of many streams at once, one process per usable CPU.

Traces are independent streams, and so are the CPUs of one trace with
``--per-cpu``.  Each stream is replayed whole by one worker, by the very code
that replays a single trace (the command passes it in); the parent prints the
workers' reports in the order of the traces and CPUs.  Workers are forked, so they start with the
modules imported and pay only the loading of the kernels.  With ``--per-cpu``
each worker reads the whole trace and keeps its CPU's rows.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from ..console import warn
from ..errors import UserError


def replay_many(args, traces: list[str], replay_one) -> int:
    """Replay ``traces`` (each CPU's samples apart with ``--per-cpu``), each
    stream by ``replay_one(args, trace, output, cpu)``, which prints its report."""
    if args.labels:
        raise UserError("--labels goes with one trace: replay that trace alone")
    jobs = args.jobs or len(os.sched_getaffinity(0))
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give at least 1")
    streams = [(trace, cpu) for trace in traces
               for cpu in (cpus_of(trace, args) if args.per_cpu else [None])]
    names = [(name_of(trace) if cpu is None else f"{name_of(trace)}.cpu{cpu}")
             for trace, cpu in streams]
    outputs = output_paths(args.output, names)
    work = [(replay_one, args, trace, out, cpu) for (trace, cpu), out in zip(streams, outputs)]
    with ProcessPoolExecutor(max_workers=min(jobs, len(work)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        results = list(pool.map(replay_captured, work))
    failed = [error for _, error in results if error]
    if args.json:
        reports = [{"trace": trace, **({} if cpu is None else {"cpu": cpu}), **json.loads(text)}
                   for (trace, cpu), (text, error) in zip(streams, results) if not error]
        print(json.dumps(reports, indent=2))
    else:
        print("\n".join(text for text, error in results if not error), end="")
    if failed:
        raise UserError(f"{len(failed)} of {len(streams)} streams failed; the first: {failed[0]}")
    return 0


def name_of(trace: str) -> str:
    return os.path.splitext(os.path.basename(trace))[0]


def cpus_of(trace: str, args) -> list[int]:
    """The CPUs whose samples ``trace`` holds, ascending."""
    import numpy as np

    from ..formats.tracefiles import open_trace
    source = open_trace(trace, base_mhz=args.base_mhz, warn=warn)
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
        raise UserError(f"--output {folder}: with several traces or --per-cpu, "
                        f"give a folder for their results")
    os.makedirs(folder, exist_ok=True)
    if len(set(names)) < len(names):
        raise UserError("two traces share a name, so their results would share a file: "
                        "rename one, or replay them separately")
    return [os.path.join(folder, name + ".jsonl") for name in names]


def replay_captured(job) -> tuple[str, str | None]:
    """Replay one trace in a worker: (what it printed, the error if it failed)."""
    replay_one, args, trace, output, cpu = job
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            replay_one(args, trace, output, cpu)
    except UserError as exc:
        return "", str(exc)
    return printed.getvalue(), None


def samples_of_cpu(batches, cpu: int):
    """The rows of ``cpu``: one CPU's samples, an independent stream."""
    from ..core.batch import SampleBatch
    for batch in batches:
        rows = batch["cpu"] == cpu
        if rows.any():
            yield SampleBatch({name: column[rows] for name, column in batch.columns.items()})
