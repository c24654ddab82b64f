"""Replay of a SimPoint ``.bb`` file with the ``bbv`` detector.

The file has no clock and no cycle counts: intervals carry their instruction
counts, times and cycles are 0, and CPI is unknown.  Its intervals reach the
sinks through the same driver as sample streams'.
"""

from __future__ import annotations

import numpy as np

from ..core.driver import Classified, Driver, Streams
from ..core.pipeline import Intervals, PipelineStats
from ..errors import UserError
from ..formats.bbvfile import read_bb
from .bbvdetect import BbvDetector

#: Intervals projected and classified at a time (the whole file is read first).
CHUNK = 4096
#: A .bb replay's driver has no sample streams: the intervals come classified.
NO_SAMPLES = Streams(lambda name: None)


def check_detector(detector: str) -> None:
    if detector == "vpf-ip":
        raise UserError("a SimPoint .bb file holds basic-block vectors, not samples: "
                        "replay it with --detector bbv")


class BbClassifier:
    """The bbv detector over a .bb file's intervals."""

    def __init__(self, params):
        self.params = params
        self.detector = BbvDetector(params)

    def run(self, path: str, driver: Driver) -> None:
        """Classify every interval of the file, handing each chunk to the driver's sinks."""
        vectors = read_bb(path)
        last = -1
        for a in range(0, len(vectors), CHUNK):
            rows = vectors.counts[a:a + CHUNK]
            instr = np.asarray(rows.sum(axis=1)).ravel().astype(np.int64)
            phase, dist, new, status = self.detector.feed(rows, instr)
            n = len(instr)
            zeros = np.zeros(n, np.int64)
            iv = Intervals(np.arange(a, a + n, dtype=np.int64), zeros, zeros, instr, zeros,
                           zeros, dist, phase, new, np.full(n, np.nan), np.full(n, np.nan),
                           status=status)
            previous = np.concatenate([[last], phase[:-1]]).astype(np.int64)
            last = int(phase[-1]) if n else last
            driver.deliver(Classified("", iv, previous))

    def stats(self) -> PipelineStats:
        return PipelineStats("bbv", self.params.adaptive, "as in the .bb file", 0,
                             float(self.detector.state.threshold[0]), {}, {})
