"""SimPoint's published method, offline, on scikit-learn.

SimPoint 3.2 (Hamerly, Perelman, Lau, Calder, "SimPoint 3.0: Faster and More
Flexible Program Analysis", 2005) clusters basic-block vectors so:

1. each interval's vector is normalised to sum 1;
2. it is projected to 15 dimensions by a random matrix with entries drawn
   uniformly from [-1, 1] (``-dim 15``);
3. k-means runs for k = 1 .. max_k (``-maxK``), each from several random
   seeds (``-numInitSeeds 5``) taking k sampled intervals as initial centres,
   the best of the seeds kept;
4. each clustering is scored by the Bayesian information criterion of Pelleg
   and Moore's X-means (a spherical Gaussian per cluster, one shared variance);
5. the chosen k is the smallest whose score reaches 90 % of the way from the
   lowest score to the highest (``-bicThreshold 0.9``).

The simulation points are the intervals nearest each centre (in the projected
space), and the weights each cluster's share of the intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans

DIM = 15
MAX_K = 10
INIT_SEEDS = 5
BIC_THRESHOLD = 0.9


@dataclass
class SimPointResult:
    labels: np.ndarray          # cluster of each interval
    k: int
    bic: np.ndarray             # score of k = 1 .. len(bic)
    simpoints: np.ndarray       # per cluster: the interval nearest its centre
    weights: np.ndarray         # per cluster: its share of the intervals
    projected: np.ndarray


def normalise(counts) -> np.ndarray:
    """Rows scaled to sum 1; ``counts`` dense or scipy sparse."""
    total = np.asarray(counts.sum(axis=1), np.float64).reshape(-1, 1)
    total[total == 0] = 1.0
    return counts.multiply(1.0 / total).tocsr() if hasattr(counts, "multiply") \
        else np.asarray(counts, np.float64) / total


def random_projection(counts, dim: int = DIM, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.uniform(-1.0, 1.0, size=(counts.shape[1], dim))
    return np.asarray(normalise(counts) @ matrix)


def bic(points: np.ndarray, labels: np.ndarray, centres: np.ndarray) -> float:
    """X-means BIC: log-likelihood of spherical Gaussians with one shared
    variance, less (free parameters / 2) * log(R)."""
    r, d = points.shape
    k = len(centres)
    sse = float(((points - centres[labels]) ** 2).sum())
    if r <= k:
        return -np.inf
    variance = max(sse / (d * (r - k)), 1e-300)
    sizes = np.bincount(labels, minlength=k).astype(np.float64)
    sizes = sizes[sizes > 0]
    loglik = float((sizes * np.log(sizes)).sum() - r * np.log(r)
                   - r * d / 2.0 * np.log(2.0 * np.pi * variance) - d * (r - k) / 2.0)
    params = (k - 1) + d * k + 1
    return loglik - params / 2.0 * np.log(r)


def choose_k(scores: np.ndarray, threshold: float = BIC_THRESHOLD) -> int:
    finite = np.isfinite(scores)
    lo, hi = scores[finite].min(), scores[finite].max()
    if hi <= lo:
        return 1
    reach = lo + threshold * (hi - lo)
    return int(np.flatnonzero(finite & (scores >= reach))[0]) + 1


def simpoint(counts, max_k: int = MAX_K, dim: int = DIM, seed: int = 0,
             init_seeds: int = INIT_SEEDS, threshold: float = BIC_THRESHOLD) -> SimPointResult:
    points = random_projection(counts, dim, seed)
    n = len(points)
    fits, scores = [], []
    for k in range(1, min(max_k, n) + 1):
        km = KMeans(n_clusters=k, init="random", n_init=init_seeds, random_state=seed).fit(points)
        fits.append(km)
        scores.append(bic(points, km.labels_, km.cluster_centers_))
    scores = np.array(scores)
    k = choose_k(scores, threshold)
    km = fits[k - 1]
    labels, centres = _compact(km.labels_, km.cluster_centers_)
    return SimPointResult(labels, len(centres), scores,
                          nearest_to_centres(points, labels, centres),
                          np.bincount(labels, minlength=len(centres)) / n, points)


def _compact(labels: np.ndarray, centres: np.ndarray):
    """Drop empty clusters and renumber in order of first appearance."""
    order = list(dict.fromkeys(labels.tolist()))
    remap = np.full(len(centres), -1, np.int64)
    remap[order] = np.arange(len(order))
    return remap[labels], centres[order]


def nearest_to_centres(points: np.ndarray, labels: np.ndarray, centres: np.ndarray) -> np.ndarray:
    out = np.empty(len(centres), np.int64)
    for c in range(len(centres)):
        members = np.flatnonzero(labels == c)
        d = ((points[members] - centres[c]) ** 2).sum(axis=1)
        out[c] = members[np.argmin(d)]
    return out
