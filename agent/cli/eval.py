"""``phasewatch eval A B``: how far two phase labellings of the same intervals agree."""

from __future__ import annotations

import json
import math

import numpy as np
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from ..console import rich_console
from ..errors import UserError
from ..formats.labellings import Labelling, read_labelling, read_labels


def add_arguments(parser) -> None:
    parser.add_argument("a", metavar="A", help="a labelling: JSON Lines results, a JSON list "
                                               "of labels, or SimPoint labels")
    parser.add_argument("b", metavar="B", help="the labelling to compare it with")
    parser.add_argument("--cpi", metavar="FILE",
                        help="per-interval CPI as a JSON list (otherwise taken from results "
                             "that have cycles)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def cpi_cov_quality(labels: np.ndarray, cpi: np.ndarray) -> float:
    """The thesis's homogeneity: mean over phases of the CoV of CPI, a phase of
    one interval counting as the whole run's CoV.  Lower is better."""
    ok = ~np.isnan(cpi)
    labels, cpi = labels[ok], cpi[ok]
    if len(cpi) == 0:
        return math.nan
    run = _cov(cpi)
    # Per phase from sums over one sort of the intervals, not a pass per phase.
    _, ids, n = np.unique(labels, return_inverse=True, return_counts=True)
    total = np.bincount(ids, cpi)
    mean = total / n
    var = np.maximum(np.bincount(ids, (cpi - mean[ids]) ** 2) / n, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        covs = np.where(mean != 0, np.sqrt(var) / mean, np.nan)
    covs = np.where(n == 1, run, covs)
    return float(np.mean(covs))


def _cov(x: np.ndarray) -> float:
    m = x.mean()
    return float(x.std() / m) if m else math.nan


def compare(a: Labelling, b: Labelling, cpi: np.ndarray | None) -> dict:
    if len(a) != len(b):
        raise UserError(f"{a.path} has {len(a)} intervals and {b.path} {len(b)}: "
                        f"compare labellings of the same intervals")
    out = {
        "intervals": len(a),
        "a": {"path": a.path, "kind": a.kind, "phases": a.n_phases},
        "b": {"path": b.path, "kind": b.kind, "phases": b.n_phases},
        "ari": float(adjusted_rand_score(a.labels, b.labels)),
        "nmi": float(normalized_mutual_info_score(a.labels, b.labels)),
    }
    if cpi is not None:
        out["a"]["cpi_cov"] = cpi_cov_quality(a.labels, cpi)
        out["b"]["cpi_cov"] = cpi_cov_quality(b.labels, cpi)
        out["one_phase_cpi_cov"] = cpi_cov_quality(np.zeros(len(a), np.int64), cpi)
    return out


#: The largest CPI taken (a stalled core's is in the thousands): beyond it,
#: the squares summed for a CoV overflow.
MAX_CPI = 1e9


def pick_cpi(args, a: Labelling, b: Labelling) -> np.ndarray | None:
    if args.cpi:
        values = read_labels(args.cpi)
        try:
            cpi = np.array(values, np.float64)
        except (TypeError, ValueError):
            raise UserError(f"{args.cpi}: CPI must be a JSON list of numbers") from None
        if cpi.ndim != 1 or len(cpi) != len(a):
            raise UserError(f"{args.cpi}: {len(cpi)} CPI values for {len(a)} intervals")
        wrong = np.flatnonzero(~np.isnan(cpi) & ~((cpi >= 0) & (cpi <= MAX_CPI)))
        if len(wrong):
            raise UserError(f"{args.cpi}: CPI {cpi[wrong[0]]:g} of interval {wrong[0]} is out of "
                            f"range (0 to {MAX_CPI:g}, or NaN where unknown)")
        return cpi
    return a.cpi if a.cpi is not None else b.cpi


def run(args) -> int:
    a, b = read_labelling(args.a), read_labelling(args.b)
    result = compare(a, b, pick_cpi(args, a, b))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    out = rich_console()
    out.print(f"{result['intervals']} intervals")
    for side in ("a", "b"):
        r = result[side]
        cov = f", mean per-phase CoV of CPI {r['cpi_cov']:.4f}" if "cpi_cov" in r else ""
        out.print(f"{side.upper()} {r['path']} ({r['kind']}): {r['phases']} phases{cov}")
    out.print(f"adjusted Rand index {result['ari']:.4f}, "
              f"normalised mutual information {result['nmi']:.4f}")
    if "one_phase_cpi_cov" in result:
        out.print(f"one phase (whole run) CoV of CPI {result['one_phase_cpi_cov']:.4f}")
    return 0
