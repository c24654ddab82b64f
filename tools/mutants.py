#!/usr/bin/env python3
"""Mutation testing (``make mutants``): cosmic-ray over agent/core/,
agent/formats/ and agent/report/diff.py, each module against the fast test
files that exercise it.

The checkout is never changed: the sources and tests are copied to a tree
of this run's own under ``build/mutants/`` and imported from there
(``phasewatch`` on PYTHONPATH, ahead of the editable install), cosmic-ray
mutates the copy, and the copy is removed at the end; several runs over
different modules can go side by side.
Each module has a session of its own (``build/mutants/NAME.sqlite``); a
session already run is resumed, so the work can be spread over several runs.
The report (killed / total per module, and the survivors) goes to stdout and
``build/mutants/report.md``.

The operators are cosmic-ray's, with one replacement per operator site
rather than every one: a binary operator by its counterpart (``+`` by ``-``,
``*`` by ``/``, ``<<`` by ``>>`` …), a comparison by its boundary and its
negation (``<`` by ``<=`` and ``>=``).  Removing a decorator is left out:
without ``@kernel`` a kernel runs as the same Python, a mutant no test can
tell from the original.

    python tools/mutants.py                 # every module (hours)
    python tools/mutants.py core/codemap    # chosen modules
    python tools/mutants.py --report        # the report of what has run
    python tools/mutants.py --retest-survivors --only-survivors core/predict
                                            # its survivors again, after new tests

A session is stamped with the SHA-256 of the module it was made from and is
made afresh when the module has changed (its mutants name places by line and
column).  Mutants inside annotations are skipped: with ``from __future__
import annotations`` no annotation is evaluated.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "mutants"
TREE = BUILD / f"tree-{os.getpid()}"
BIN = Path(sys.executable).parent

#: Module (under agent/) -> the test files that check it and run in seconds.
#: kernels.py (the choice between compiled kernels and numba's JIT) is
#: tested by compiling, which mutants run without.
TESTS = {
    "core/codemap.py": ["test_codemap.py"],
    "core/decode.py": ["test_decode.py"],
    "core/registers.py": ["test_collectors_msr.py", "test_kmod_layout.py", "test_decode.py"],
    "core/batch.py": ["test_pipeline.py", "test_decode.py", "test_trace.py"],
    "core/source.py": ["test_pipeline.py", "test_daemon_targets.py"],
    "core/driver.py": ["test_pipeline.py", "test_daemon_targets.py"],
    "core/intervals.py": ["test_classify.py", "test_pipeline_runs.py", "test_counter_ratio.py",
                          "test_pipeline.py"],
    "core/pipeline.py": ["test_pipeline_setup.py", "test_pipeline_runs.py", "test_counter_ratio.py",
                         "test_pipeline.py"],
    "core/cpumodels.py": ["test_collectors_sysfs.py", "test_decode.py", "test_settings.py"],
    "core/histograms.py": ["test_histograms.py", "test_noise_model.py", "test_code_resolutions.py"],
    "core/reference.py": ["test_decode.py", "test_pipeline.py", "test_synthetic_eight.py"],
    "core/settings.py": ["test_settings.py", "test_recorded_settings.py"],
    "core/detectors.py": ["test_settings.py", "test_pipeline.py"],
    "core/params.py": ["test_settings.py", "test_classify.py", "test_pipeline.py",
                       "test_codemap.py"],
    "core/classify.py": ["test_classify.py", "test_pipeline.py"],
    "core/predict.py": ["test_predict_worked.py", "test_predict.py"],
    "core/prediction.py": ["test_predict_worked.py", "test_predict.py"],
    "core/distinct.py": ["test_distinct.py"],
    "report/diff.py": ["test_diff.py"],
    "formats/results.py": ["test_results_format.py"],
    "formats/metadata.py": ["test_robust.py", "test_trace.py"],
    "formats/trace.py": ["test_trace.py", "test_replay_memory.py"],
    "formats/csvtrace.py": ["test_trace.py", "test_robust.py"],
    "formats/sidetable.py": ["test_codemap.py", "test_hostile_files.py"],
    "formats/labellings.py": ["test_simpoint_interop.py", "test_hostile_inputs.py"],
    "formats/bbvfile.py": ["test_simpoint_interop.py", "test_hostile_inputs.py"],
    "formats/energytable.py": ["test_phase_energy.py"],
    "formats/outputs.py": ["test_robust.py", "test_hostile_files.py"],
    "formats/pprof.py": ["test_pprof.py"],
    "formats/synthetic.py": ["test_synthetic_eight.py", "test_pipeline.py"],
    "formats/tracefiles.py": ["test_replay_folder.py", "test_robust.py"],
    "formats/inputs.py": ["test_robust.py"],
}

_BINARY = ("Add_Sub", "Sub_Add", "Mul_Div", "Div_Mul", "FloorDiv_Div", "Mod_FloorDiv", "Pow_Mul",
           "LShift_RShift", "RShift_LShift", "BitOr_BitAnd", "BitAnd_BitOr", "BitXor_BitOr")
_COMPARISON = ("Lt_LtE", "Lt_GtE", "LtE_Lt", "LtE_Gt", "Gt_GtE", "Gt_LtE", "GtE_Gt", "GtE_Lt",
               "Eq_NotEq", "NotEq_Eq", "Is_IsNot", "IsNot_Is", "In_NotIn", "NotIn_In")
EXCLUDED_OPERATORS = [
    rf"core/ReplaceBinaryOperator_(?!({'|'.join(_BINARY)})$)",
    rf"core/ReplaceComparisonOperator_(?!({'|'.join(_COMPARISON)})$)",
    r"core/RemoveDecorator",
]


def copy_tree() -> None:
    """The sources and tests as they are in the checkout, in TREE."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("agent", "tests", "examples", "tools", "kmod", "docs"):
        shutil.copytree(ROOT / name, TREE / name, ignore=ignore, symlinks=True)
    for name in ("setup.cfg", "pyproject.toml"):
        shutil.copy2(ROOT / name, TREE / name)
    (TREE / ".import").mkdir()
    (TREE / ".import" / "phasewatch").symlink_to(TREE / "agent")


def environment() -> dict[str, str]:
    # The kernels run as Python: numba's cache keeps a kernel compiled with
    # the constants and callees of other modules as they were, so a mutant
    # there would go unseen; compiling afresh for every mutant takes longer
    # than the tests.
    env = dict(os.environ, PYTHONPATH=str(TREE / ".import"), PYTHONDONTWRITEBYTECODE="1",
               NUMBA_DISABLE_JIT="1", PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    env.pop("PHASEWATCH_KERNELS", None)
    return env


#: Tests left out: those that fail on any change of source (the
#: ahead-of-time kernels are built from the sources as they were), so would
#: kill every mutant; and the one that times its code (tests/scaling.py),
#: which fails of load on a host the mutants themselves keep busy, a kill
#: that is no kill.
SOURCE_CHECKS = ("not test_the_module_is_built_from_these_sources and not needs_no_jit"
                 " and not test_mappings_build_in_time_that_grows_about_linearly")


def test_command(module: str) -> str:
    """The command line cosmic-ray runs (it splits it with shlex)."""
    return shlex.join([str(BIN / "python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                       "-m", "not slow and not kmod", "-k", SOURCE_CHECKS,
                       *(f"tests/{t}" for t in TESTS[module])])


def config(module: str, timeout: float) -> str:
    excluded = ", ".join(f"'{e}'" for e in EXCLUDED_OPERATORS)
    return (f'[cosmic-ray]\nmodule-path = "agent/{module}"\ntimeout = {timeout:.0f}\n'
            f'excluded-modules = []\ntest-command = {json.dumps(test_command(module))}\n'
            f'[cosmic-ray.distributor]\nname = "local"\n'
            f'[cosmic-ray.filters.operators-filter]\nexclude-operators = [{excluded}]\n')


def session(module: str) -> Path:
    return BUILD / (module.replace("/", "_").removesuffix(".py") + ".sqlite")


def run_module(module: str) -> None:
    """Mutants of ``module`` against its tests (the session resumed if it exists)."""
    env = environment()
    started = time.monotonic()
    baseline = subprocess.run(shlex.split(test_command(module)), cwd=TREE, env=env,
                              capture_output=True, text=True)
    took = time.monotonic() - started
    if baseline.returncode != 0 or " passed" not in baseline.stdout:
        sys.exit(f"mutants: the tests of {module} fail unmutated:\n{baseline.stdout[-2000:]}")
    cfg = BUILD / (session(module).stem + ".toml")
    cfg.write_text(config(module, timeout=3 * took + 30))
    db = session(module)
    if db.exists() and db.stat().st_size and not made_from_this_source(module):
        print(f"mutants: {module}: its session was made from other source; starting afresh",
              flush=True)
        db.unlink()
    if not db.exists() or db.stat().st_size == 0:    # an empty file is no session
        subprocess.run([str(BIN / "cosmic-ray"), "init", str(cfg), str(db)], cwd=TREE, env=env,
                       check=True)
        subprocess.run([str(BIN / "cr-filter-operators"), str(db), str(cfg)], cwd=TREE, env=env,
                       check=True)
        skip_annotations(module)
        source_stamp(module).write_text(source_digest(module))
    print(f"mutants: {module}: tests take {took:.1f} s unmutated", flush=True)
    subprocess.run([str(BIN / "cosmic-ray"), "exec", str(cfg), str(db)], cwd=TREE, env=env,
                   check=True)
    restored = (TREE / "agent" / module).read_bytes() == (ROOT / "agent" / module).read_bytes()
    assert restored, f"cosmic-ray left agent/{module} mutated in {TREE}"


def source_stamp(module: str) -> Path:
    return BUILD / (session(module).stem + ".sha256")


def source_digest(module: str) -> str:
    return hashlib.sha256((ROOT / "agent" / module).read_bytes()).hexdigest()


def made_from_this_source(module: str) -> bool:
    """Whether the session's mutants were found in the module as it is now: a
    session of other source would mutate other places than it names."""
    stamp = source_stamp(module)
    return stamp.exists() and stamp.read_text().strip() == source_digest(module)


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of every annotation: with ``from __future__ import
    annotations`` none is evaluated, so a mutant there is the same program."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = [node.returns]
        elif isinstance(node, ast.arg):
            found = [node.annotation]
        elif isinstance(node, ast.AnnAssign):
            found = [node.annotation]
        else:
            continue
        spans += [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset))
                  for a in found if a is not None]
    return spans


def skip_annotations(module: str) -> None:
    """Mark the mutants inside annotations as skipped, as mutmut does not make
    them (idempotent; a result they had is replaced)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult
    source = (ROOT / "agent" / module).read_text()
    if "from __future__ import annotations" not in source:
        return                  # its annotations are evaluated: mutants there count
    spans = annotation_spans(source)
    with use_db(str(session(module)), WorkDB.Mode.open) as db:
        for item in db.work_items:
            m = item.mutations[0]
            start, end = tuple(m.start_pos), tuple(m.end_pos)
            if any(a <= start and end <= b for a, b in spans):
                db.set_result(item.job_id, WorkResult(output="In an annotation",
                                                      worker_outcome=WorkerOutcome.SKIPPED))


RETEST = "CREATE TABLE IF NOT EXISTS retest (job_id VARCHAR PRIMARY KEY)"


def forget_survivors(module: str) -> None:
    """Drop the results of the mutants that survived, so that the session's
    next run tries them again; they are listed in ``retest`` and count as
    survivors until they have run again."""
    if session(module).exists() and session(module).stat().st_size:
        with sqlite3.connect(session(module)) as db:
            db.execute(RETEST)
            db.execute("INSERT OR IGNORE INTO retest SELECT job_id FROM work_results "
                       "WHERE test_outcome IN ('SURVIVED', 'survived')")
            db.execute("DELETE FROM work_results WHERE test_outcome IN ('SURVIVED', 'survived')")


def waiting_retest(module: str) -> set[str]:
    """Survivors set aside to run again that have not run yet."""
    with sqlite3.connect(session(module)) as db:
        db.execute(RETEST)
        return {j for (j,) in db.execute("SELECT job_id FROM retest WHERE job_id NOT IN "
                                          "(SELECT job_id FROM work_results)")}


DEFERRED = "Deferred: only the survivors run again"


def defer_unrun(module: str, deferred: bool) -> None:
    """Set aside the mutants not yet run (marked skipped), or bring them
    back, so that a run of the survivors alone tries nothing else."""
    if not (session(module).exists() and session(module).stat().st_size):
        return
    with sqlite3.connect(session(module)) as db:
        if deferred:
            db.execute(RETEST)
            db.execute("INSERT INTO work_results (worker_outcome, output, job_id) "
                       "SELECT 'SKIPPED', ?, job_id FROM work_items "
                       "WHERE job_id NOT IN (SELECT job_id FROM work_results) "
                       "AND job_id NOT IN (SELECT job_id FROM retest)", (DEFERRED,))
        else:
            db.execute("DELETE FROM work_results WHERE output = ?", (DEFERRED,))


def tally(module: str) -> tuple[int, int, int, list[str]]:
    """(killed, done, total, survivors as 'line: operator') of a session."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome
    with use_db(str(session(module)), WorkDB.Mode.open) as db:
        items = {w.job_id: w for w in db.work_items}
        results = dict(db.results)
    counted = {j: r for j, r in results.items() if r.worker_outcome != WorkerOutcome.SKIPPED}
    total = len(items) - (len(results) - len(counted))
    killed = [j for j, r in counted.items() if r.test_outcome != TestOutcome.SURVIVED]
    # a survivor set aside to run again is one until it has
    survived = [j for j, r in counted.items() if r.test_outcome == TestOutcome.SURVIVED]
    survived += sorted(waiting_retest(module))
    survivors = sorted((items[j].mutations[0].start_pos[0], items[j].mutations[0].operator_name)
                       for j in survived)
    return (len(killed), len(killed) + len(survived), total,
            [f"{line}: {op}" for line, op in survivors])


def report(modules: list[str]) -> str:
    lines = ["| module | killed / run | run / mutants | score |", "|---|---|---|---|"]
    survivors = []
    for module in modules:
        if not session(module).exists():
            continue
        skip_annotations(module)     # also in sessions made before it was
        killed, done, total, left = tally(module)
        score = f"{100 * killed / done:.1f} %" if done else "-"
        lines.append(f"| agent/{module} | {killed} / {done} | {done} / {total} | {score} |")
        survivors += [f"- agent/{module}:{s}" for s in left]
    return "\n".join(lines + ["", "Survivors:", ""] + survivors) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", metavar="MODULE",
                        help="e.g. core/codemap (default: every module mapped to tests)")
    parser.add_argument("--report", action="store_true", help="only report what has run")
    parser.add_argument("--retest-survivors", action="store_true",
                        help="run the mutants that survived again (after new tests)")
    parser.add_argument("--only-survivors", action="store_true",
                        help="with --retest-survivors: those alone, not the mutants not yet run")
    args = parser.parse_args()
    chosen = [m if m.endswith(".py") else m + ".py" for m in args.modules] or list(TESTS)
    unknown = [m for m in chosen if m not in TESTS]
    if unknown:
        sys.exit(f"mutants: no tests mapped for {', '.join(unknown)}: one of {', '.join(TESTS)}")
    BUILD.mkdir(parents=True, exist_ok=True)
    only = args.retest_survivors and args.only_survivors
    if not args.report:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit("mutants: stopped (the session resumes)"))
        copy_tree()
        try:
            for module in chosen:
                if only:
                    defer_unrun(module, True)
                if args.retest_survivors:
                    forget_survivors(module)
                try:
                    run_module(module)
                finally:
                    if only:
                        defer_unrun(module, False)
        finally:
            shutil.rmtree(TREE)
    text = report(chosen)
    (BUILD / "report.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
