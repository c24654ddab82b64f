"""Replay of many traces at once, one process per usable CPU.

Traces are independent streams, so each is replayed whole by one worker, by
the very code that replays a single trace; the parent prints the workers'
reports in the order the traces were given.  Workers are forked, so they
start with the modules imported and pay only the loading of the kernels.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from .errors import UserError


def replay_many(args, traces: list[str]) -> int:
    if args.labels:
        raise UserError("--labels goes with one trace: replay that trace alone")
    outputs = output_paths(args.output, traces)
    jobs = args.jobs or len(os.sched_getaffinity(0))
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give at least 1")
    work = [(args, trace, out) for trace, out in zip(traces, outputs)]
    with ProcessPoolExecutor(max_workers=min(jobs, len(work)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        results = list(pool.map(replay_captured, work))
    failed = [error for _, error in results if error]
    if args.json:
        reports = [{"trace": trace, **json.loads(text)}
                   for trace, (text, error) in zip(traces, results) if not error]
        print(json.dumps(reports, indent=2))
    else:
        print("\n".join(text for text, error in results if not error), end="")
    if failed:
        raise UserError(f"{len(failed)} of {len(traces)} traces failed; the first: {failed[0]}")
    return 0


def output_paths(folder: str | None, traces: list[str]) -> list[str | None]:
    """``FOLDER/<trace name>.jsonl`` for each trace, or None without --output."""
    if not folder:
        return [None] * len(traces)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UserError(f"--output {folder}: with several traces, give a folder for their results")
    os.makedirs(folder, exist_ok=True)
    names = [os.path.splitext(os.path.basename(t))[0] for t in traces]
    if len(set(names)) < len(names):
        raise UserError("two traces share a name, so their results would share a file: "
                        "rename one, or replay them separately")
    return [os.path.join(folder, name + ".jsonl") for name in names]


def replay_captured(job) -> tuple[str, str | None]:
    """Replay one trace in a worker: (what it printed, the error if it failed)."""
    from .cmd_replay import replay
    args, trace, output = job
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            replay(args, trace, output)
    except UserError as exc:
        return "", str(exc)
    return printed.getvalue(), None
