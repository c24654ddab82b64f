"""``phasewatch export --simpoints RESULTS``: phases as SimPoint's output files.

``PREFIX.simpoints`` has one line per phase, ``<interval> <phase>``: the
interval nearest the phase's centroid.  ``PREFIX.weights`` has
``<weight> <phase>``: the phase's share of the intervals.  Both are the files
``simpoint -saveSimpoints -saveSimpointWeights`` writes, phases numbered from 0.
"""

from __future__ import annotations

import os

import numpy as np

from ..console import warn
from ..errors import UserError
from ..formats.bbvfile import read_bb
from ..formats.inputs import file_kind
from ..formats.labellings import Labelling, read_labelling
from ..formats.outputs import check_outputs, write_all_or_none
from ..simpoint.bbvdetect import project_matrix
from ..simpoint.method import nearest_to_centres


def add_arguments(parser) -> None:
    parser.add_argument("--simpoints", metavar="RESULTS", required=True,
                        help="phase labels: JSON Lines results, a JSON list, or SimPoint labels")
    parser.add_argument("--bb", metavar="FILE",
                        help="the .bb file the phases are of: centroids are then taken over "
                             "its basic-block vectors (otherwise the member with the smallest "
                             "recorded distance to its phase represents it)")
    parser.add_argument("-o", "--output", metavar="PREFIX",
                        help="write PREFIX.simpoints and PREFIX.weights "
                             "(default: RESULTS without its extension)")


def representatives(labelling: Labelling, vectors: np.ndarray | None) -> np.ndarray:
    """The interval that stands for each phase."""
    labels = labelling.labels
    k = int(labels.max()) + 1
    if vectors is not None:
        centres = np.array([vectors[labels == p].mean(axis=0) for p in range(k)])
        return nearest_to_centres(vectors, labels, centres)
    dist = labelling.distance if labelling.distance is not None else np.full(len(labels), np.nan)
    # Each phase's first member with the smallest known distance (its first
    # member if none is known): one sort of all intervals, not one pass per phase.
    key = np.where(np.isnan(dist), np.inf, dist)
    order = np.lexsort((np.arange(len(labels)), key, labels))
    firsts = np.flatnonzero(np.r_[True, labels[order][1:] != labels[order][:-1]])
    return order[firsts]


def check_prefix(prefix: str) -> None:
    """A prefix that is a device, a FIFO or a folder was meant as the output
    itself (``-o /dev/null``): PREFIX.simpoints would be made beside it."""
    if os.path.exists(prefix) and not os.path.isfile(prefix):
        kind = file_kind(os.stat(prefix).st_mode)
        raise UserError(f"{prefix}: {kind}: -o takes a prefix for two files, "
                        f"PREFIX.simpoints and PREFIX.weights; give a path such as out/phases")


def output_paths(prefix: str) -> tuple[str, str]:
    return prefix + ".simpoints", prefix + ".weights"


def write_simpoints(prefix: str, labels: np.ndarray, points: np.ndarray,
                    inputs=()) -> tuple[str, str]:
    """Both files, or neither: each is put in place only when both are complete."""
    weights = np.bincount(labels, minlength=len(points)) / len(labels)
    paths = output_paths(prefix)
    check_outputs(paths, inputs)
    write_all_or_none([
        (paths[0], False, lambda f: f.writelines(f"{int(i)} {p}\n" for p, i in enumerate(points))),
        (paths[1], False, lambda f: f.writelines(f"{w:.6f} {p}\n" for p, w in enumerate(weights)))])
    return paths


def run(args) -> int:
    prefix = args.output or os.path.splitext(args.simpoints)[0]
    check_prefix(prefix)
    inputs = [args.simpoints, args.bb]
    check_outputs(output_paths(prefix), inputs)
    labelling = read_labelling(args.simpoints)
    if labelling.instruction_intervals is False and not args.bb:
        warn(f"{args.simpoints}: its intervals are sample counts or times, not instructions "
             f"(none were counted on the host that ran it), while SimPoint's simulation points "
             f"and weights assume intervals of equal instruction counts: read them with care")
    labels = labelling.labels
    if (labels < 0).any():
        raise UserError(f"{args.simpoints}: negative phase labels: give complete intervals only")
    present = np.unique(labels)
    if len(present) != labels.max() + 1:
        _, labels = np.unique(labels, return_inverse=True)   # phases with no interval
        labelling.labels = labels
    vectors = None
    if args.bb:
        bb = read_bb(args.bb)
        if len(bb) != len(labels):
            raise UserError(f"{args.bb} has {len(bb)} intervals and {args.simpoints} "
                            f"{len(labels)}: give the .bb file the phases were found in")
        vectors = project_matrix(bb.counts)
    sp_path, w_path = write_simpoints(prefix, labels, representatives(labelling, vectors), inputs)
    print(f"{sp_path}, {w_path}: {int(labels.max()) + 1} phases over {len(labels)} intervals")
    return 0
