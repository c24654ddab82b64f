"""The ``bbv`` detector: leader-follower over a random projection of
basic-block vectors (SimPoint's ``.bb`` files).

Each basic block is hashed to one of ``dim`` entries: a sparse random
projection, as ScarPhase does with branch addresses, that needs no table of
the blocks seen so far and so runs online.  An interval's vector is the share
of its instructions in each entry, a histogram, so the leader-follower
classifier of the sample detectors is reused as it is, with the
total-variation distance.  The counts are exact, not sampled, so the
classifier is told each interval's instruction count as its number of
samples, which makes the sampling-noise allowance vanish.
"""

from __future__ import annotations

import numpy as np

from ..core.classify import ClassifierState, classify, classify_reference
from ..core.histograms import TOTAL_VARIATION
from ..core.kernels import kernel
from ..core.params import DetectorParams

DEFAULT_DIM = 128
DEFAULT_SEED = 0x5EED


@kernel(cache=True, nogil=True)
def _mix(x):
    """splitmix64's finaliser: a well-spread 64-bit hash."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@kernel(cache=True, nogil=True)
def project(indptr, ids, counts, dim, seed, out):
    """Row ``i`` of ``out`` (zeroed by the caller) gets the normalised sum of
    the counts of entries ``indptr[i]:indptr[i+1]``, each in the entry its
    block id hashes to."""
    s = np.uint64(seed)
    for i in range(len(indptr) - 1):
        total = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            b = _mix(np.uint64(ids[k]) ^ s) % np.uint64(dim)
            out[i, b] += counts[k]
            total += counts[k]
        if total > 0.0:
            for j in range(dim):
                out[i, j] /= total


def block_entry_reference(ids: np.ndarray, dim: int, seed: int) -> np.ndarray:
    x = ids.astype(np.uint64) ^ np.uint64(seed)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x % np.uint64(dim)).astype(np.int64)


def project_reference(indptr, ids, counts, dim: int, seed: int) -> np.ndarray:
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    out = np.zeros((len(indptr) - 1, dim))
    np.add.at(out, (rows, block_entry_reference(ids, dim, seed)), counts)
    total = out.sum(axis=1, keepdims=True)
    return np.divide(out, total, out=np.zeros_like(out), where=total > 0)


def project_matrix(counts_csr, dim: int = DEFAULT_DIM, seed: int = DEFAULT_SEED) -> np.ndarray:
    out = np.zeros((counts_csr.shape[0], dim))
    project(counts_csr.indptr.astype(np.int64), counts_csr.indices.astype(np.int64),
            counts_csr.data.astype(np.float64), dim, seed, out)
    return out


class BbvDetector:
    """Online: feed it intervals' basic-block vectors, it returns their phases."""

    def __init__(self, params: DetectorParams, dim: int = DEFAULT_DIM, seed: int = DEFAULT_SEED):
        self.dim, self.seed = dim, seed
        self.state = ClassifierState(dim, 1, params)
        self.bounds = np.array([0, dim], np.int64)
        self.kinds = np.array([TOTAL_VARIATION], np.int64)
        self.used = np.ones(1, np.bool_)

    def feed(self, counts_csr, instructions: np.ndarray):
        """(phase, distance, new_phase) of each row of ``counts_csr``."""
        vectors = project_matrix(counts_csr, self.dim, self.seed)
        return classify(vectors, self._sizes(instructions), self.bounds, self.kinds,
                        self.used, self.state)

    def reference(self, counts_csr, instructions: np.ndarray):
        """The same decisions from the numpy projection and the plain-Python classifier."""
        c = counts_csr
        vectors = project_reference(c.indptr, c.indices, c.data.astype(np.float64),
                                    self.dim, self.seed)
        return classify_reference(vectors, self._sizes(instructions), self.bounds, self.kinds,
                                  self.used, self.state.params)

    @staticmethod
    def _sizes(instructions: np.ndarray) -> np.ndarray:
        return np.maximum(np.asarray(instructions, np.int64), 1).reshape(-1, 1)

    @property
    def n_phases(self) -> int:
        return self.state.n_phases
