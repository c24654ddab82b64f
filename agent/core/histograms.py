"""Histogram kernels: binning, instruction-pointer folding and distances.

Each kernel has a plain numpy reference beside it; the tests hold one to the other.
"""

from __future__ import annotations

import numpy as np

from .kernels import kernel
from .params import CODE_RESOLUTIONS

CUMULATIVE = 0          # ordered bins: cumulative histogram distance
TOTAL_VARIATION = 1     # unordered bins (folded IPs): half the L1 distance
#: Unordered bins in CODE_RESOLUTIONS equal blocks, one per resolution of the
#: code signature, each holding an equal share of every sample: each block is
#: compared on its own, and the largest distance counts.
MULTI_RESOLUTION = 2
#: Ordered bins compared beyond sampling noise: the cumulative distance less
#: what noise alone reaches (cumulative_noise_level), as the code signature's.
CUMULATIVE_BEYOND_NOISE = 3
#: The noise model's significance: a total-variation distance is counted only
#: beyond the level that sampling noise alone exceeds with probability 1 %
#: (one-sided z of the normal approximation).
NOISE_Z = 2.326
#: A resolution of the code signature counts only where sampling noise alone
#: stays under this total-variation distance: beyond it, the estimate of new
#: code divides by a small remainder and magnifies the noise.
RESOLUTION_NOISE_LIMIT = 0.5


@kernel(cache=True, nogil=True, error_model="numpy")
def value_bins(values, lo, hi, nbins, out):
    """Bin of each value in ``nbins`` equal bins over [lo, hi); values outside
    fall in the end bins; -1 for NaN."""
    scale = nbins / (hi - lo)
    top = nbins - 1
    for i in range(len(values)):
        v = values[i]
        x = min(max((v - lo) * scale, 0.0), float(top))
        out[i] = int(x) if v == v else -1


@kernel(cache=True, nogil=True, error_model="numpy")
def ip_bins(ips, lo, hi, bits, groups, out):
    """Spatial-aware projection of instruction pointers onto 2**bits entries.

    The position of an IP inside the text range [lo, hi) is scaled to
    ``bits * groups`` bits (IPs outside fall at the ends), split into
    ``groups`` groups of ``bits`` bits, and the groups are XOR-folded.  The top
    group keeps coarse code regions apart; folding in the finer groups spreads
    a region's hot spots over the entries.  -1 for an unknown IP (0).
    """
    total = 1 << (bits * groups)
    scale = total / float(hi - lo)
    mask = (1 << bits) - 1
    for i in range(len(ips)):
        ip = ips[i]
        if ip < lo:
            pos = 0
        elif ip >= hi:
            pos = total - 1
        else:
            pos = min(int(float(np.int64(ip - lo)) * scale), total - 1)
        folded = 0
        for _ in range(groups):
            folded ^= pos & mask
            pos >>= bits
        out[i] = folded if ip != 0 else -1


@kernel(cache=True, nogil=True)
def fill(values, lo, hi, nbins):
    """Counts of ``values`` in ``nbins`` bins over [lo, hi), NaNs skipped."""
    bins = np.empty(len(values), np.int32)
    value_bins(values, lo, hi, nbins, bins)
    h = np.zeros(nbins, np.float64)
    for b in bins:
        if b >= 0:
            h[b] += 1.0
    return h


def fill_reference(values: np.ndarray, lo: float, hi: float, nbins: int) -> np.ndarray:
    v = values[~np.isnan(values)]
    idx = np.clip(np.floor((v - lo) * (nbins / (hi - lo))), 0, nbins - 1).astype(np.int64)
    return np.bincount(idx, minlength=nbins).astype(np.float64)


def ip_bins_reference(ips: np.ndarray, lo: int, hi: int, bits: int, groups: int) -> np.ndarray:
    """Entry per IP (-1 for IP 0), computed with whole-array numpy operations."""
    ips = np.asarray(ips, np.uint64)
    total = 1 << (bits * groups)
    inside = (ips >= np.uint64(lo)) & (ips < np.uint64(hi))
    pos = np.where(ips < np.uint64(lo), 0, total - 1).astype(np.int64)
    offs = (ips[inside] - np.uint64(lo)).astype(np.float64)
    pos[inside] = np.minimum((offs * (total / float(hi - lo))).astype(np.int64), total - 1)
    folded = np.zeros(len(ips), np.int64)
    for _ in range(groups):
        folded ^= pos & ((1 << bits) - 1)
        pos >>= bits
    folded[ips == 0] = -1
    return folded


@kernel(cache=True, nogil=True, fastmath=True)
def cumulative_distance(h1, h2):
    """Cumulative histogram distance of two normalised histograms, in 0..1."""
    n = len(h1)
    prefix = 0.0
    d = 0.0
    for i in range(n):
        prefix += h1[i] - h2[i]
        d += abs(prefix)
    return d / (n - 1) if n > 1 else 0.0


def cumulative_distance_reference(h1: np.ndarray, h2: np.ndarray) -> float:
    n = len(h1)
    return float(np.abs(np.cumsum(h1 - h2)).sum() / (n - 1)) if n > 1 else 0.0


@kernel(cache=True, nogil=True, fastmath=True)
def total_variation_distance(h1, h2):
    """Half the L1 distance of two normalised histograms, in 0..1."""
    d = 0.0
    for i in range(len(h1)):
        d += abs(h1[i] - h2[i])
    return 0.5 * d


def total_variation_distance_reference(h1: np.ndarray, h2: np.ndarray) -> float:
    return float(0.5 * np.abs(h1 - h2).sum())


@kernel(cache=True, nogil=True, fastmath=True)
def expected_total_variation(h, n):
    """Total-variation distance expected between ``h`` and a histogram of ``n``
    samples drawn from it: sampling noise alone (normal approximation)."""
    s = 0.0
    for p in h:
        s += np.sqrt(p * (1.0 - p))
    return 0.5 * s * np.sqrt(2.0 / (np.pi * n)) if n > 0 else 0.0


def expected_total_variation_reference(h: np.ndarray, n: int) -> float:
    return float(0.5 * np.sqrt(h * (1 - h)).sum() * np.sqrt(2 / (np.pi * n))) if n > 0 else 0.0


@kernel(cache=True, nogil=True, fastmath=True)
def noise_level(h, n_eff):
    """``scaled_noise_level`` of ``h`` as it is."""
    return scaled_noise_level(h, 1.0, n_eff)


@kernel(cache=True, nogil=True, fastmath=True)
def scaled_noise_level(h, scale, n_eff):
    """The total-variation distance that sampling noise alone stays under with
    probability 1 - 1 %: between ``h`` and a histogram of ``n_eff`` samples
    drawn from it, mean plus ``NOISE_Z`` standard deviations.  Per entry the
    deviation of a share is about normal with variance p(1-p)/n, so its absolute
    value has mean sqrt(2/pi) sigma and variance (1 - 2/pi) sigma^2; entries are
    taken as independent.  ``h`` is a histogram times ``1 / scale``."""
    if n_eff <= 0.0:
        return 0.0
    s, v = 0.0, 0.0
    for p in h:
        p *= scale
        q = p * (1.0 - p)
        s += np.sqrt(q)
        v += q
    mean = 0.5 * s * np.sqrt(2.0 / (np.pi * n_eff))
    sd = 0.5 * np.sqrt((1.0 - 2.0 / np.pi) * v / n_eff)
    return mean + NOISE_Z * sd


def noise_level_reference(h: np.ndarray, n_eff: float) -> float:
    if n_eff <= 0:
        return 0.0
    q = h * (1 - h)
    return float(0.5 * np.sqrt(q).sum() * np.sqrt(2 / (np.pi * n_eff))
                 + NOISE_Z * 0.5 * np.sqrt((1 - 2 / np.pi) * q.sum() / n_eff))


@kernel(cache=True, nogil=True, fastmath=True)
def cumulative_noise_level(h, n_eff):
    """The cumulative distance that sampling noise alone stays under with
    probability 1 - 1 %, between ``h`` and a histogram of ``n_eff`` samples
    drawn from it.  The cumulative share F below each bin edge deviates by
    about a normal of variance F(1-F)/n; the mean of its absolute value is
    sqrt(2/pi) sigma.  The edges are strongly correlated, so the standard
    deviation of their sum is bounded by the sum of theirs, (1 - 2/pi)^1/2
    sigma each: the level is an upper bound, never below the noise."""
    n = len(h)
    if n_eff <= 0.0 or n < 2:
        return 0.0
    f, s = 0.0, 0.0
    for i in range(n - 1):
        f += h[i]
        s += np.sqrt(max(f * (1.0 - f), 0.0))
    per_edge = np.sqrt(2.0 / np.pi) + NOISE_Z * np.sqrt(1.0 - 2.0 / np.pi)
    return min(s * per_edge / np.sqrt(n_eff) / (n - 1), 1.0)


def cumulative_noise_level_reference(h: np.ndarray, n_eff: float) -> float:
    if n_eff <= 0 or len(h) < 2:
        return 0.0
    f = np.cumsum(h)[:-1]
    spread = np.sqrt(np.clip(f * (1 - f), 0, None)).sum()
    per_edge = np.sqrt(2 / np.pi) + NOISE_Z * np.sqrt(1 - 2 / np.pi)
    return float(min(spread * per_edge / np.sqrt(n_eff) / (len(h) - 1), 1.0))


def effective_samples(n: int, members: int) -> float:
    """Samples behind a difference of an interval of ``n`` samples and a
    centroid of ``members`` intervals of about as many: both carry noise."""
    return n * members / (members + 1.0) if members > 0 else float(n)


effective_samples_kernel = kernel(cache=True, nogil=True)(effective_samples)


def beyond_noise(tv: float, level: float) -> float:
    """The share of new code ``D`` behind a distance ``tv`` when noise alone
    reaches ``level``: ``(tv - level) / (1 - level)``, at least 0."""
    return max(tv - level, 0.0) / (1.0 - level) if level < 1.0 else 0.0


beyond_noise_kernel = kernel(cache=True, nogil=True)(beyond_noise)


@kernel(cache=True, nogil=True)
def segment_distance(x, n, centroid, members, kind):
    """Distance of an interval's histogram ``x`` of ``n`` samples to the
    centroid of ``members`` intervals.

    Code signatures are unordered and sparse: an interval of a hundred samples
    differs from its own phase's centroid by sampling noise alone.  The noise
    model: if the interval's code is a share ``D`` of new code and ``1 - D``
    drawn from the centroid, its observed total-variation distance is about
    ``D + (1 - D) L``, where ``L`` is what noise alone gives.  So ``D`` is
    estimated as ``(TV - L) / (1 - L)``, with ``L`` the level noise stays under
    at 1 % significance: a difference noise cannot explain keeps its size,
    however few the samples, and the estimate tends to the plain distance as
    samples grow.
    """
    if kind == TOTAL_VARIATION:
        level = noise_level(centroid, effective_samples_kernel(n, members))
        return beyond_noise_kernel(total_variation_distance(x, centroid), level)
    if kind == MULTI_RESOLUTION:
        return code_distance(x, n, centroid, members)
    if kind == CUMULATIVE_BEYOND_NOISE:
        level = cumulative_noise_level(centroid, effective_samples_kernel(n, members))
        return beyond_noise_kernel(cumulative_distance(x, centroid), level)
    return cumulative_distance(x, centroid)


@kernel(cache=True, nogil=True, fastmath=True)
def code_distance(x, n, centroid, members):
    """The larger of ``multi_resolution_distance`` and ``unseen_code_distance``
    in one pass over each resolution, skipping the entries neither side has
    (most of them): what the classifier runs for every comparison."""
    width = len(x) // CODE_RESOLUTIONS
    scale = float(CODE_RESOLUTIONS)
    n_eff = effective_samples_kernel(n, members)
    samples = float(n * members)
    d = 0.0
    for r in range(CODE_RESOLUTIONS):
        tv, s, v, once, unseen = 0.0, 0.0, 0.0, 0.0, 0.0
        for j in range(r * width, (r + 1) * width):
            p = centroid[j] * scale
            q = x[j] * scale
            if p == 0.0:
                tv += q
                unseen += q
                continue
            tv += abs(q - p)
            pq = p * (1.0 - p)
            s += np.sqrt(pq)
            v += pq
            if p * samples < 1.5:
                once += 1.0
        tv = min(0.5 * tv, 1.0)
        if n_eff > 0.0:
            level = (0.5 * s * np.sqrt(2.0 / (np.pi * n_eff))
                     + NOISE_Z * 0.5 * np.sqrt((1.0 - 2.0 / np.pi) * v / n_eff))
        else:
            level = 0.0
        if r == 0 or level <= RESOLUTION_NOISE_LIMIT:
            d = max(d, beyond_noise_kernel(tv, level))
        if samples > 0.0:
            turing = min(once / samples, 1.0)
            if r == 0 or turing <= RESOLUTION_NOISE_LIMIT:
                level = turing + NOISE_Z * np.sqrt(turing * (1.0 - turing) / n)
                d = max(d, beyond_noise_kernel(unseen, level))
    return d


@kernel(cache=True, nogil=True)
def multi_resolution_distance(x, centroid, n_eff):
    """The largest of the noise-corrected distances of the resolutions.  At a
    resolution where the phase's code is spread thin (cache lines of a large
    program), noise alone reaches total variation 1 at a few dozen samples and
    that resolution says nothing and is left out (the first, coarsest, always
    counts); where it is concentrated (two hot loops a
    cache line apart), it tells them apart however close they lie."""
    width = len(x) // CODE_RESOLUTIONS
    d = 0.0
    for r in range(CODE_RESOLUTIONS):
        lo, hi = r * width, (r + 1) * width
        tv = CODE_RESOLUTIONS * total_variation_distance(x[lo:hi], centroid[lo:hi])
        level = scaled_noise_level(centroid[lo:hi], float(CODE_RESOLUTIONS), n_eff)
        if r == 0 or level <= RESOLUTION_NOISE_LIMIT:
            d = max(d, beyond_noise_kernel(min(tv, 1.0), level))
    return d


def multi_resolution_distance_reference(x, centroid, n_eff) -> float:
    blocks = zip(np.split(np.asarray(x) * CODE_RESOLUTIONS, CODE_RESOLUTIONS),
                 np.split(np.asarray(centroid) * CODE_RESOLUTIONS, CODE_RESOLUTIONS))
    levels = [(total_variation_distance_reference(xb, cb), noise_level_reference(cb, n_eff))
              for xb, cb in blocks]
    return max(beyond_noise(min(tv, 1.0), level) for r, (tv, level) in enumerate(levels)
               if r == 0 or level <= RESOLUTION_NOISE_LIMIT)


def segment_distance_reference(x, n, centroid, members, kind) -> float:
    if kind == TOTAL_VARIATION:
        level = noise_level_reference(centroid, effective_samples(n, members))
        return beyond_noise(total_variation_distance_reference(x, centroid), level)
    if kind == MULTI_RESOLUTION:
        return max(multi_resolution_distance_reference(x, centroid, effective_samples(n, members)),
                   unseen_code_distance_reference(x, n, centroid, members))
    if kind == CUMULATIVE_BEYOND_NOISE:
        level = cumulative_noise_level_reference(centroid, effective_samples(n, members))
        return beyond_noise(cumulative_distance_reference(x, centroid), level)
    return cumulative_distance_reference(x, centroid)


@kernel(cache=True, nogil=True)
def unseen_code_distance(x, n, centroid, members):
    """The share of an interval's samples in code its phase never ran, beyond
    what the phase's own unseen code explains: the dense side of the
    comparison, which holds at a few dozen samples where total variation
    does not.

    The phase has run about ``n * members`` samples; by Good and Turing, a new
    sample of the same phase lands in an entry it has never seen with
    probability about (entries seen once) / (samples).  The interval's share
    in unseen entries is compared with that level plus ``NOISE_Z`` binomial
    standard deviations, and what exceeds it is rescaled to 0..1 as in
    ``beyond_noise``.  Per resolution; a resolution whose unseen share exceeds
    ``RESOLUTION_NOISE_LIMIT`` (lines of a large program) is left out, the
    coarsest always counts."""
    width = len(x) // CODE_RESOLUTIONS
    samples = float(n * members)
    d = 0.0
    if samples <= 0.0:
        return d
    for r in range(CODE_RESOLUTIONS):
        lo = r * width
        once, unseen = 0.0, 0.0
        for j in range(lo, lo + width):
            count = centroid[j] * CODE_RESOLUTIONS * samples
            if count == 0.0:
                unseen += x[j] * CODE_RESOLUTIONS
            elif count < 1.5:
                once += 1.0
        turing = min(once / samples, 1.0)
        if r > 0 and turing > RESOLUTION_NOISE_LIMIT:
            continue
        level = turing + NOISE_Z * np.sqrt(turing * (1.0 - turing) / n)
        d = max(d, beyond_noise_kernel(unseen, level))
    return d


def unseen_code_distance_reference(x, n, centroid, members) -> float:
    samples = float(n * members)
    if samples <= 0:
        return 0.0
    d = 0.0
    for r, (xb, cb) in enumerate(zip(np.split(np.asarray(x) * CODE_RESOLUTIONS, CODE_RESOLUTIONS),
                                     np.split(np.asarray(centroid) * CODE_RESOLUTIONS,
                                              CODE_RESOLUTIONS))):
        counts = cb * samples
        turing = min(float(np.sum((counts > 0) & (counts < 1.5))) / samples, 1.0)
        if r > 0 and turing > RESOLUTION_NOISE_LIMIT:
            continue
        level = turing + NOISE_Z * np.sqrt(turing * (1 - turing) / n)
        d = max(d, beyond_noise(float(xb[counts == 0].sum()), level))
    return d
