"""Phase identity under phasewatchd: a behaviour keeps its id and name
across a program restart and a daemon restart, whichever appears first;
the code signature of a ``comm:`` target does not change with ASLR."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_identity import one_try


@pytest.fixture(scope="module")
def sequence(abab) -> Path:
    return abab.parent / "sequence"


@pytest.mark.slow
@pytest.mark.parametrize("orders", [("AB", "BA", "AB"), ("BA", "AB", "BA")])
def test_a_behaviour_keeps_its_id_and_name_across_program_and_daemon_restarts(
        sequence, tmp_path, orders):
    held, runs = one_try(sequence, tmp_path / "try", orders)
    assert held, runs
