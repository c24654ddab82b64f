"""Replay of a SimPoint ``.bb`` file with the ``bbv`` detector.

The file has no clock and no cycle counts: intervals carry their instruction
counts, times and cycles are 0, and CPI is unknown.
"""

from __future__ import annotations

import numpy as np

from ..core.pipeline import Intervals
from ..errors import UserError
from ..formats.bbvfile import read_bb
from .bbvdetect import BbvDetector

#: Intervals projected and classified at a time (the whole file is read first).
CHUNK = 4096


def check_detector(detector: str) -> None:
    if detector == "vpf-ip":
        raise UserError("a SimPoint .bb file holds basic-block vectors, not samples: "
                        "replay it with --detector bbv")


def classify_bb(path: str, params) -> tuple[list[Intervals], BbvDetector]:
    vectors = read_bb(path)
    detector = BbvDetector(params)
    parts = []
    for a in range(0, len(vectors), CHUNK):
        rows = vectors.counts[a:a + CHUNK]
        instr = np.asarray(rows.sum(axis=1)).ravel().astype(np.int64)
        phase, dist, new = detector.feed(rows, instr)
        n = len(instr)
        zeros = np.zeros(n, np.int64)
        parts.append(Intervals(np.arange(a, a + n, dtype=np.int64), zeros, zeros, instr,
                               zeros, zeros, dist, phase, new,
                               np.full(n, np.nan), np.full(n, np.nan)))
    return parts, detector


class _BbInterval:
    @staticmethod
    def describe() -> str:
        return "as in the .bb file"


class BbvReport:
    """What the replay report reads of a pipeline, for a ``.bb`` replay."""

    samples = 0

    def __init__(self, detector: BbvDetector, params):
        self.detector = detector
        self.params = type("P", (), {"detector": params, "interval": _BbInterval})

    @property
    def threshold(self) -> float:
        return float(self.detector.state.threshold[0])

    @staticmethod
    def dropped() -> dict[str, int]:
        return {}

    @staticmethod
    def implausible() -> dict[str, int]:
        return {}
