"""Shared pytest fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import Phase, settings

WORKLOADS = Path(__file__).parent / "workloads"

# The first call of a numba kernel compiles it or loads it from the cache:
# no per-example deadline.
settings.register_profile("phasewatch", deadline=None)
# Mutation runs (tools/mutants.py) want a failure, not the smallest one:
# shrinking a mutant's failing example can take a minute.
settings.register_profile("mutants", deadline=None,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("PHASEWATCH_HYPOTHESIS_PROFILE", "phasewatch"))


@pytest.fixture(autouse=True, scope="module")
def module_phase_catalog(tmp_path_factory):
    """A module's fixtures keep their phase catalogue apart ($XDG_STATE_HOME)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
        yield


@pytest.fixture(autouse=True)
def own_phase_catalog(tmp_path_factory, monkeypatch, module_phase_catalog):
    """Each test's runs keep their phase catalogue apart ($XDG_STATE_HOME):
    phases learnt by one test never seed another's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="session")
def abab(tmp_path_factory) -> Path:
    """The A-B-A test program (tests/workloads/abab.c), compiled once per session
    as a normal PIE executable."""
    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.fail("building tests/workloads needs gcc and make (apt-get install gcc make)")
    out = tmp_path_factory.mktemp("workloads")
    subprocess.run(["make", "-s", "-C", str(WORKLOADS), f"OUT={out}", "CC=gcc"], check=True)
    return out / "abab"


@pytest.fixture
def zombie():
    """A process that has ended but is not reaped yet; reaped after the test."""
    ended = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while Path(f"/proc/{ended.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline, "true did not end within 5 s"
        time.sleep(0.01)
    yield ended
    ended.wait()


@pytest.fixture(scope="session")
def closefns(abab) -> Path:
    """The two-close-functions program (tests/workloads/closefns.c), built
    beside abab."""
    return abab.parent / "closefns"


#: Generated cases run by the property-based (fuzz) tests, by target; printed
#: at the end of the session so that the CI log shows how much was tried.
FUZZ_CASES: dict[str, int] = {}


@pytest.fixture(scope="session")
def fuzz_count():
    def count(target: str) -> None:
        FUZZ_CASES[target] = FUZZ_CASES.get(target, 0) + 1
    return count


#: Files of named hostile-input cases, whose passing count the summary shows.
HOSTILE_FILES = ("test_robust.py", "test_hostile_files.py", "test_hostile_inputs.py",
                 "test_daemon_hostile.py", "test_hostile_bytes.py", "test_hostile_markup.py",
                 "test_hostile_stdio.py", "test_hostile_outputs.py", "test_hostile_processes.py",
                 "test_hostile_targets.py")


def pytest_terminal_summary(terminalreporter):
    passed = [r.nodeid.split("::")[0].rsplit("/", 1)[-1]
              for r in terminalreporter.stats.get("passed", []) if r.when == "call"]
    hostile = {name: passed.count(name) for name in HOSTILE_FILES if name in passed}
    if hostile:
        cases = ", ".join(f"{name} {n}" for name, n in hostile.items())
        terminalreporter.write_line(f"hostile-input cases passed: {sum(hostile.values())} "
                                    f"({cases})")
    if FUZZ_CASES:
        cases = ", ".join(f"{target} {n}" for target, n in sorted(FUZZ_CASES.items()))
        terminalreporter.write_line(f"fuzz cases run: {sum(FUZZ_CASES.values())} ({cases})")


def mounted_tmpfs(folder: Path, size: str):
    """A tmpfs of ``size`` at ``folder``: a real disk that fills."""
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {proc.stderr.strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 256 KiB tmpfs: a real full disk."""
    yield from mounted_tmpfs(tmp_path / "tiny", "256k")


@pytest.fixture
def small_filesystem(tmp_path):
    """A 1 MiB tmpfs: a real disk that fills."""
    yield from mounted_tmpfs(tmp_path / "small", "1m")
