"""Phase identity under phasewatchd: a behaviour keeps its id and name
across a program restart and a daemon restart, whichever appears first;
the code signature of a ``comm:`` target does not change with ASLR."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from daemon_identity import Watched, config, one_try, own_copy

from phasewatch.formats.catalog import Catalog


@pytest.fixture(scope="module")
def sequence(abab) -> Path:
    return abab.parent / "sequence"


@pytest.mark.slow
@pytest.mark.parametrize("orders", [("AB", "BA", "AB"), ("BA", "AB", "BA")])
def test_a_behaviour_keeps_its_id_and_name_across_program_and_daemon_restarts(
        sequence, tmp_path, orders):
    held, runs = one_try(sequence, tmp_path / "try", orders)
    assert held, runs


def load_address(pid: int, program: Path) -> int:
    for line in open(f"/proc/{pid}/maps"):
        if line.rstrip().endswith(str(program)):
            return int(line.split("-", 1)[0], 16)
    raise AssertionError(f"{program} not mapped in {pid}")


@pytest.mark.slow
def test_the_code_signature_of_a_command_target_is_unchanged_by_aslr(sequence, tmp_path):
    program = own_copy(sequence, tmp_path)
    catalog = tmp_path / "catalog.sqlite"
    runs, bases = [], []
    with Watched(config(tmp_path, program, catalog)) as w:
        for _ in range(3):              # started, then restarted twice
            proc = subprocess.Popen([str(program), "A", "0.8"])
            time.sleep(0.05)
            bases.append(load_address(proc.pid, program))
            assert proc.wait(timeout=60) == 0
            runs.append(w.drain(f"comm:{program.name}"))
    assert len(set(bases)) == 3, bases          # the program loaded at three addresses
    ids = [r.get("fa") for r in runs]
    assert all(i is not None and len(i) == 1 for i in ids) and ids[0] == ids[1] == ids[2], runs
    kept = Catalog(catalog, create=False)
    names = [p.name for prog in kept.programs() for p in kept.phases(prog["key"])]
    kept.close()
    assert "fa" in names and not [n for n in names if n.startswith("fa~")], names
