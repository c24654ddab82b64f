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
import re
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
#: checked by its tests that need no compiling (those that do are left out).
TESTS = {
    "core/codemap.py": ["test_codemap.py", "test_codemap_worked.py"],
    "core/decode.py": ["test_decode.py"],
    "core/registers.py": ["test_collectors_msr.py", "test_kmod_layout.py", "test_decode.py"],
    "core/batch.py": ["test_pipeline.py", "test_decode.py", "test_trace.py", "test_codemap.py"],
    "core/source.py": ["test_pipeline.py", "test_daemon_targets.py", "test_core_imports.py"],
    "core/driver.py": ["test_pipeline.py", "test_daemon_targets.py"],
    "core/intervals.py": ["test_intervals_worked.py", "test_classify.py", "test_pipeline_runs.py",
                          "test_counter_ratio.py", "test_pipeline.py", "test_pipeline_worked.py"],
    "core/pipeline.py": ["test_pipeline_setup.py", "test_pipeline_runs.py", "test_counter_ratio.py",
                         "test_pipeline.py", "test_pipeline_worked.py"],
    "core/cpumodels.py": ["test_cpumodels.py", "test_collectors_sysfs.py", "test_decode.py",
                          "test_settings.py"],
    "core/histograms.py": ["test_histograms.py", "test_noise_model.py", "test_code_resolutions.py",
                           "test_histograms_worked.py"],
    "core/reference.py": ["test_reference_worked.py", "test_decode.py", "test_pipeline.py",
                          "test_synthetic_eight.py"],
    "core/settings.py": ["test_settings.py", "test_recorded_settings.py", "test_core_imports.py"],
    "core/detectors.py": ["test_settings.py", "test_pipeline.py"],
    "core/params.py": ["test_settings.py", "test_classify.py", "test_pipeline.py",
                       "test_codemap.py"],
    "core/classify.py": ["test_classify_worked.py", "test_classify.py", "test_classify_rules.py",
                         "test_counter_ratio.py", "test_pipeline.py"],
    "core/predict.py": ["test_predict_worked.py", "test_predict.py", "test_predict_compiled.py",
                        "test_predict_reference.py", "test_predict_state.py"],
    "core/prediction.py": ["test_prediction_score.py", "test_predict_worked.py", "test_predict.py",
                           "test_predict_compiled.py", "test_predict_reference.py"],
    "core/distinct.py": ["test_distinct.py"],
    "core/kernels.py": ["test_kernels.py", "test_probe.py"],
    "report/diff.py": ["test_diff.py"],
    "formats/results.py": ["test_results_format.py"],
    "formats/metadata.py": ["test_robust.py", "test_trace.py"],
    "formats/schema.py": ["test_robust.py", "test_trace.py", "test_fuzz.py"],
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
               NUMBA_DISABLE_JIT="1", OPENBLAS_NUM_THREADS="1",
               PHASEWATCH_HYPOTHESIS_PROFILE="mutants", PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    # Not the ahead-of-time module either: the tree's sources are the
    # checkout's, so it would be taken for the unmutated run, and the map of
    # the lines each test runs would leave out every kernel's.
    env["PHASEWATCH_KERNELS"] = "jit"
    return env


#: Tests left out: those that fail on any change of source (the
#: ahead-of-time kernels are built from the sources as they were, and a
#: mutant leaves them out of date), so would kill every mutant; and the one that times its code (tests/scaling.py),
#: which fails of load on a host the mutants themselves keep busy, a kill
#: that is no kill.
SOURCE_CHECKS = ("not test_the_module_is_built_from_these_sources and not needs_no_jit"
                 " and not test_sources_as_built_are_known_by_their_stamps_and_else_by_their_hash"
                 " and not test_mappings_build_in_time_that_grows_about_linearly"
                 " and not test_arguments_of_another_type_take_the_jit_and_are_right")


def pytest_args(module: str) -> list[str]:
    """pytest over the module's test files, as the unmutated run and the map take them."""
    return [str(BIN / "python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
            "-m", "not slow and not kmod", "-k", SOURCE_CHECKS,
            *(f"tests/{t}" for t in TESTS[module])]


def test_command(module: str) -> str:
    """The command line cosmic-ray runs for each mutant (it splits it with
    shlex, and runs it in the tree): this script again, which runs only the
    tests that execute the mutated lines (``test_mutant``)."""
    return shlex.join([str(BIN / "python"), "tools/mutants.py", "--test-mutant", module,
                       "--build", str(BUILD)])


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
    took = line_map(module, env)
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
    print(f"mutants: {module}: tests take {took:.1f} s unmutated, under coverage", flush=True)
    server = subprocess.Popen([str(BIN / "python"), "tools/mutants.py", "--serve"], cwd=TREE,
                              env=env)
    try:
        subprocess.run([str(BIN / "cosmic-ray"), "exec", str(cfg), str(db)], cwd=TREE, env=env,
                       check=True)
    finally:
        server.kill()
        server.wait()
    restored = (TREE / "agent" / module).read_bytes() == (ROOT / "agent" / module).read_bytes()
    assert restored, f"cosmic-ray left agent/{module} mutated in {TREE}"


def map_file(module: str, build: Path = BUILD) -> Path:
    return build / (session(module).stem + ".lines.json")


def map_digest(module: str) -> str:
    """What a module's line map depends on: the module, its test files, the fixtures."""
    digest = hashlib.sha256(b"map 2\0" + (ROOT / "agent" / module).read_bytes())
    for name in ["conftest.py", *TESTS[module]]:
        digest.update((ROOT / "tests" / name).read_bytes())
    return digest.hexdigest()


DURATION = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(\S.*)$")


def line_map(module: str, env: dict[str, str]) -> float:
    """Run the module's tests once, unmutated, under coverage with a context per
    test, and write which tests execute each line of the module and how long
    each test takes (``NAME.lines.json``, kept while the module, its tests and
    the fixtures are unchanged). Returns the seconds the run took."""
    out = map_file(module)
    if out.exists():
        kept = json.loads(out.read_text())
        if kept["digest"] == map_digest(module):
            return kept["seconds"]
    data, rc = BUILD / (session(module).stem + ".coverage"), BUILD / (session(module).stem + ".coveragerc")
    rc.write_text(f"[run]\ninclude =\n    */phasewatch/{module}\n    */agent/{module}\n")
    data.unlink(missing_ok=True)
    started = time.monotonic()
    run = subprocess.run([*pytest_args(module), "--cov", f"--cov-config={rc}", "--cov-context=test",
                          "--cov-report=", "--durations=0", "--durations-min=0", "-vv"],
                         cwd=TREE, env=dict(env, COVERAGE_FILE=str(data)),
                         capture_output=True, text=True)
    took = time.monotonic() - started
    if run.returncode != 0 or " passed" not in run.stdout:
        sys.exit(f"mutants: the tests of {module} fail unmutated:\n{run.stdout[-3000:]}")
    seconds: dict[str, float] = {}
    for line in run.stdout.splitlines():
        if m := DURATION.match(line):
            seconds[m[2]] = seconds.get(m[2], 0.0) + float(m[1])
    import coverage
    measured = coverage.CoverageData(basename=str(data))
    measured.read()
    files = [f for f in measured.measured_files() if f.endswith("/" + module)]
    assert len(files) == 1, f"coverage measured {files} for {module}"
    by_line = measured.contexts_by_lineno(files[0])
    # every test that ran: one that runs no line of the module may still read
    # what its import made (a constant, a table)
    tests = sorted(set(seconds) | {c.rpartition("|")[0] for cs in by_line.values() for c in cs if c},
                   key=lambda t: (seconds.get(t, 0.0), t))
    index = {t: i for i, t in enumerate(tests)}
    every = list(range(len(tests)))
    lines = {}
    for line, contexts in by_line.items():
        # a line run outside any test ran at import or collection: every test
        # may see it
        lines[line] = every if "" in contexts else sorted(
            {index[c.rpartition("|")[0]] for c in contexts})
    listed = subprocess.run([str(BIN / "python"), "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:cacheprovider", *tests], cwd=TREE, env=env,
                            capture_output=True, text=True)
    if listed.returncode != 0:    # a test named as pytest cannot find it again
        sys.exit(f"mutants: the tests of {module} are not found by their ids:\n"
                 f"{listed.stdout[-3000:]}")
    out.write_text(json.dumps({"digest": map_digest(module), "seconds": took,
                               "source": (ROOT / "agent" / module).read_text(),
                               "tests": tests, "durations": [seconds.get(t, 0.0) for t in tests],
                               "lines": lines}))
    data.unlink(missing_ok=True)
    return took


def statement_lines(source: str) -> dict[int, range]:
    """For each line, the lines of the innermost statement that holds it (of a
    compound statement, its header): a mutant in an expression spread over
    lines is run by whatever runs any of them."""
    spans: dict[int, range] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
        end = min(c.lineno for c in children) - 1 if children else node.end_lineno
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span = range(first, max(end, node.lineno) + 1)
        for line in span:
            if line not in spans or len(span) < len(spans[line]):
                spans[line] = span
    return spans


def changed_lines(original: list[str], mutated: list[str]) -> set[int]:
    """The original's lines (1-based) a mutant changed."""
    import difflib
    changed = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, original, mutated,
                                                     autojunk=False).get_opcodes():
        if tag != "equal":
            changed.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return changed


def tests_for_mutant(kept: dict, mutated: str) -> list[str]:
    """The tests that run any line of the statements the mutant changed,
    quickest first."""
    source = kept["source"]
    spans = statement_lines(source)
    chosen: set[int] = set()
    for line in changed_lines(source.splitlines(), mutated.splitlines()):
        for covered in spans.get(line, [line]):
            chosen.update(kept["lines"].get(str(covered), ()))
    return [kept["tests"][i] for i in sorted(chosen)]


def test_mutant(module: str, build: Path) -> int:
    """Run (in the tree, with the mutant in place) the tests that execute the
    mutated lines, with ``-x``; none: the mutant survives without a run. The
    exit status is pytest's; a run over its time is a kill, as cosmic-ray
    counts one."""
    kept = json.loads(map_file(module, build).read_text())
    tests = tests_for_mutant(kept, Path("agent", module).read_text())
    if not tests:
        print(f"mutants: no test runs the lines this mutant changed in {module}")
        return 0
    durations = dict(zip(kept["tests"], kept["durations"]))
    # the durations were measured under coverage, slower than a plain run
    limit = 2 * sum(durations[t] for t in tests) + 10
    # least time per kill so far first: with -x a kill costs the tests up to
    # the first failure
    kills_file = build / (session(module).stem + ".kills.json")
    kills = json.loads(kills_file.read_text()) if kills_file.exists() else {}
    tests.sort(key=lambda t: ((durations[t] + 0.05) / (kills.get(t, 0) + 1), t))
    args = ["-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        status, output = through_server(args, limit)
    except OSError:             # no server: a process of its own
        status, output = run_alone(args, limit), ""
    for failed in re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE):
        kills[failed] = kills.get(failed, 0) + 1
        kills_file.write_text(json.dumps(kills))
    if status in (4, 5):        # a usage error, no tests collected
        if "ERROR collecting" in output:   # the mutant broke an import: a kill
            return 1
        # not the mutant's doing (the ids were checked when mapped): no kill
        print(f"mutants: pytest could not run the tests (status {status})")
        return 0
    return status


def run_alone(args: list[str], limit: float) -> int:
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], start_new_session=True)
    try:
        return proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"mutants: the tests ran over {limit:.0f} s")
        return 1


#: In the tree: the socket of the process that forks a pytest for each mutant.
SERVER = ".mutant-tests.sock"
EXIT = b"\nmutants-exit-status: "


def through_server(args: list[str], limit: float) -> tuple[int, str]:
    """pytest ``args`` run by the server (``serve``), its output printed."""
    import socket
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(SERVER)
        conn.sendall(json.dumps({"args": args, "limit": limit}).encode() + b"\n")
        received = b"".join(iter(lambda: conn.recv(65536), b""))
    output, found, status = received.rpartition(EXIT)
    text = output.decode(errors="replace")
    sys.stdout.write(text)
    return (int(status) if found else 1), text


def serve() -> None:
    """Import pytest, numpy, numba and the other libraries once, then for each
    request fork a child that runs pytest (which imports phasewatch, so the
    mutant, afresh): a mutant costs its tests and not the start-up. Runs in
    the tree until killed."""
    import socket
    import numpy, pytest, hypothesis, numba, numba.np.arraymath  # noqa: F401,E401
    for name in ("pyarrow", "zmq", "psutil", "rich.console", "msgspec", "elftools.elf.elffile"):
        try:
            __import__(name)
        except ImportError:
            pass
    Path(SERVER).unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(SERVER)
        listener.listen(1)
        while True:
            conn, _ = listener.accept()
            with conn:
                request = json.loads(conn.makefile("rb").readline())
                status = run_forked(conn, request["args"], request["limit"])
                conn.sendall(EXIT + str(status).encode())


def run_forked(conn, args: list[str], limit: float) -> int:
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        import resource         # a mutant that grows without end meets this, not the host
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        os.dup2(conn.fileno(), 1)
        os.dup2(conn.fileno(), 2)
        status = 3
        try:
            import pytest
            status = int(pytest.main(args))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    deadline = time.monotonic() + limit
    while True:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else 1
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
            conn.sendall(f"mutants: the tests ran over {limit:.0f} s".encode())
            return 1
        time.sleep(0.02)


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


def kernel_option_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of the arguments of every ``@kernel(...)``: numba's options
    (cache, nogil, fastmath, inline). Mutants run the kernels as Python
    (NUMBA_DISABLE_JIT), where no option changes what a kernel computes."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        for d in getattr(node, "decorator_list", []):
            if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "kernel":
                spans += [((k.value.lineno, k.value.col_offset),
                           (k.value.end_lineno, k.value.end_col_offset)) for k in d.keywords]
    return spans


def skip_annotations(module: str) -> None:
    """Mark the mutants inside annotations (as mutmut does not make them) and
    inside numba's options of a kernel as skipped (idempotent; a result they
    had is replaced)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult
    source = (ROOT / "agent" / module).read_text()
    # with this import no annotation is evaluated: elsewhere mutants there count
    spans = ([(a, b, "In an annotation") for a, b in annotation_spans(source)]
             if "from __future__ import annotations" in source else [])
    spans += [(a, b, KERNEL_OPTION) for a, b in kernel_option_spans(source)]
    with use_db(str(session(module)), WorkDB.Mode.open) as db:
        for item in db.work_items:
            m = item.mutations[0]
            start, end = tuple(m.start_pos), tuple(m.end_pos)
            why = next((w for a, b, w in spans if a <= start and end <= b), None)
            if why:
                db.set_result(item.job_id, WorkResult(output=why,
                                                      worker_outcome=WorkerOutcome.SKIPPED))


KERNEL_OPTION = "An option of numba's: the kernels run as Python"


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


def kernel_options(module: str) -> int:
    """How many of a session's mutants are numba options, set aside."""
    with sqlite3.connect(session(module)) as db:
        return db.execute("SELECT COUNT(*) FROM work_results WHERE output = ?",
                          (KERNEL_OPTION,)).fetchone()[0]


def made(module: str) -> int:
    """How many mutants the module gives now, less those set aside (for a
    module whose session is missing or from older source): a session made
    in a scratch file and thrown away."""
    import tempfile
    from cosmic_ray.work_db import WorkDB, use_db
    source = (ROOT / "agent" / module).read_text()
    spans = kernel_option_spans(source)
    if "from __future__ import annotations" in source:
        spans += annotation_spans(source)
    with tempfile.TemporaryDirectory() as scratch:
        cfg, db = Path(scratch) / "s.toml", Path(scratch) / "s.sqlite"
        cfg.write_text(config(module, timeout=60))
        subprocess.run([str(BIN / "cosmic-ray"), "init", str(cfg), str(db)], cwd=ROOT, check=True,
                       capture_output=True)
        subprocess.run([str(BIN / "cr-filter-operators"), str(db), str(cfg)], cwd=ROOT,
                       check=True, capture_output=True)
        with use_db(str(db), WorkDB.Mode.open) as work:
            filtered = {j for j, _ in work.results}
            return sum(1 for item in work.work_items if item.job_id not in filtered
                       and not any(a <= tuple(item.mutations[0].start_pos)
                                   and tuple(item.mutations[0].end_pos) <= b for a, b in spans))


def report(modules: list[str]) -> str:
    lines = ["| module | killed / run | run / mutants | score of run | score of all "
             "| numba options |", "|---|---|---|---|---|---|"]
    survivors = []
    sums = [0, 0, 0, 0]
    for module in modules:
        if not (session(module).exists() and made_from_this_source(module)):
            # none, or one naming places the module no longer has: none run
            total = made(module)
            lines.append(f"| agent/{module} | 0 / 0 | 0 / {total} | - | 0.0 % | |")
            sums[2] += total
            continue
        skip_annotations(module)     # also in sessions made before it was
        killed, done, total, left = tally(module)
        options = kernel_options(module)
        score = f"{100 * killed / done:.1f} %" if done else "-"
        whole = f"{100 * killed / total:.1f} %" if total else "-"
        lines.append(f"| agent/{module} | {killed} / {done} | {done} / {total} | {score} "
                     f"| {whole} | {options} |")
        survivors += [f"- agent/{module}:{s}" for s in left]
        sums = [a + b for a, b in zip(sums, (killed, done, total, options))]
    killed, done, total, options = sums
    if done:
        lines.append(f"| **together** | **{killed} / {done}** | {done} / {total} "
                     f"| **{100 * killed / done:.1f} %** | **{100 * killed / total:.1f} %** "
                     f"| {options} |")
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
    parser.add_argument("--test-mutant", metavar="MODULE", help=argparse.SUPPRESS)
    parser.add_argument("--build", type=Path, default=BUILD, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
    if args.test_mutant:
        sys.exit(test_mutant(args.test_mutant, args.build))
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
