"""Phase labellings from files, whichever of three forms they take:

* phasewatch results, JSON Lines (one object per interval with ``phase``, and
  ``instructions`` and ``cycles`` from which the interval's CPI follows);
* a labels file: a JSON list, one label per interval;
* SimPoint labels (``simpoint -saveLabels``): one line per interval, the
  cluster and then, optionally, the distance to its centre.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from .inputs import read_text

#: The largest phase (cluster) id read: ids index arrays, so a huge one would
#: ask for memory beyond any machine's.
MAX_PHASE_ID = 1_000_000


@dataclass
class Labelling:
    path: str
    kind: str                       # "results", "labels" or "simpoint"
    labels: np.ndarray              # integer phase ids, one per interval
    cpi: np.ndarray | None = None   # per interval, NaN where unknown
    distance: np.ndarray | None = None
    #: Results only: whether every interval counted its instructions (else
    #: the intervals are sample counts or times).
    instruction_intervals: bool | None = None

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def n_phases(self) -> int:
        return len(np.unique(self.labels))


def phase_problem(value) -> str | None:
    """What is wrong with a phase id read from a file (-1: no phase), or None."""
    if type(value) is not int:
        return f"phase {_shown(value)} is not an integer"
    if not -1 <= value <= MAX_PHASE_ID:
        return f"phase {_shown(value)} is out of range (-1 to {MAX_PHASE_ID:,})"
    return None


def number_problem(name: str, value) -> str | None:
    """A number, or null, as results keep ``distance``, ``instructions``, ``cycles``."""
    if value is None:
        return None
    if type(value) not in (int, float) or (type(value) is int and abs(value) > 2**63):
        return f"{name} {_shown(value)} is not a number"
    return None


def _shown(value) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 30 else text[:27] + "..."


def read_labelling(path: str) -> Labelling:
    text = read_text(path, "labels")
    head = text.lstrip()[:1]
    if not head:
        raise UserError(f"{path}: empty file: no labels")
    if head == "{":
        return _results(path, text)
    if head == "[":
        return _labels(path, text)
    return _simpoint(path, text)


def _results(path: str, text: str) -> Labelling:
    phases, instr, cycles, dist = [], [], [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise UserError(f"{path}:{lineno}: not a JSON object ({exc})") from None
        except RecursionError:
            raise UserError(f"{path}:{lineno}: not a JSON object (nested too deeply)") from None
        if not isinstance(row, dict) or "phase" not in row:
            raise UserError(f"{path}:{lineno}: no integer 'phase': give phasewatch "
                            f"results (replay --output)")
        problem = phase_problem(row["phase"]) or next(filter(None, (
            number_problem(k, row.get(k)) for k in ("distance", "instructions", "cycles"))), None)
        if problem:
            raise UserError(f"{path}:{lineno}: {problem}: give phasewatch results "
                            f"(replay --output)")
        phases.append(row["phase"])
        instr.append(float(row.get("instructions") or 0))
        cycles.append(float(row.get("cycles") or 0))
        d = row.get("distance")
        dist.append(np.nan if d is None else float(d))
    instr, cycles = np.array(instr), np.array(cycles)
    with np.errstate(divide="ignore", invalid="ignore"):
        cpi = np.where((instr > 0) & (cycles > 0), cycles / instr, np.nan)
    return Labelling(path, "results", np.array(phases, np.int64),
                     None if np.isnan(cpi).all() else cpi, np.array(dist),
                     bool(len(instr)) and bool((instr > 0).all()))


def _labels(path: str, text: str) -> Labelling:
    try:
        labels = json.loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{path}: not a JSON list of labels (nested too deeply)") from None
    if not isinstance(labels, list) or not labels:
        raise UserError(f"{path}: labels must be a non-empty JSON list, one per interval")
    if any(isinstance(x, (list, dict)) for x in labels):
        raise UserError(f"{path}: each label must be a number or a string")
    _, ids = np.unique([str(x) for x in labels], return_inverse=True)
    return Labelling(path, "labels", ids.astype(np.int64))


def _simpoint(path: str, text: str) -> Labelling:
    labels, dist = [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        cells = line.split()
        if not cells:
            continue
        try:
            labels.append(int(cells[0]))
            dist.append(float(cells[1]) if len(cells) > 1 else np.nan)
        except ValueError:
            raise UserError(f"{path}:{lineno}: expected 'cluster [distance]' (SimPoint labels), "
                            f"found {line.strip()[:40]!r}") from None
        problem = phase_problem(labels[-1])
        if problem:
            raise UserError(f"{path}:{lineno}: cluster {problem.split(' ', 1)[1]}")
    return Labelling(path, "simpoint", np.array(labels, np.int64), None, np.array(dist))


def read_labels(path: str) -> list:
    text = read_text(path, "labels")
    try:
        labels = json.loads(text)
    except RecursionError:
        raise UserError(f"{path}: not a JSON list of labels (nested too deeply)") from None
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(labels, list):
        raise UserError(f"{path}: labels must be a JSON list, one label per interval")
    return labels
