"""``phasewatch diff A B``: what changed between two recordings of the same program."""

from __future__ import annotations

import json

from ..console import rich_console, warn
from ..formats.results import finite
from .arguments import add_detector_arguments, given_settings, number


#: Width of the table when stdout is a file or pipe (a terminal's own width otherwise).
PIPE_WIDTH = 160


def add_arguments(parser) -> None:
    parser.add_argument("a", metavar="A", help="a trace of the program (the baseline)")
    parser.add_argument("b", metavar="B", help="a trace of the same program to compare with A")
    add_detector_arguments(parser, output=False)
    parser.add_argument("--tolerance", type=number(float, 0.0, 10.0), default=0.10, metavar="X",
                        help="a pair whose seconds differ by more than this share is slower "
                             "or faster (default %(default)s)")
    parser.add_argument("--min-share", type=number(float, 0.0, 1.0), default=0.05, metavar="X",
                        help="phases under this share of both runs are listed but not counted "
                             "as changes (default %(default)s)")
    parser.add_argument("--json", action="store_true",
                        help="print the comparison as JSON (an object with a 'pairs' list)")


def run(args) -> int:
    from ..report.diff import diff_runs, run_phases
    given = given_settings(args)
    a, b = run_phases(args.a, given, warn), run_phases(args.b, given, warn)
    result = diff_runs(a, b, threshold=args.threshold, tolerance=args.tolerance,
                       min_share=args.min_share)
    warn_unpaired(result)
    if args.json:
        print(json.dumps(finite(result), indent=2))
    else:
        print_table(result)
    return 0


def warn_unpaired(result: dict) -> None:
    for side in ("a", "b"):
        if result[f"unpaired_{side}"]:
            warn(f"{result[side]} has more than {result['paired_limit']} phases: the "
                 f"{result['paired_limit']} largest are paired, the other "
                 f"{result[f'unpaired_{side}']} are listed as unpaired")


#: Columns of measured values, left out where the hosts measured none.
MEASURED = ("CPI", "s/100M", "mV", "pfreq MHz", "J")


def without_dashes(rows: list[dict]) -> list[dict]:
    """The rows without the measured columns that are ``-`` in every row."""
    empty = {name for name in MEASURED if rows and all(row.get(name) == "-" for row in rows)}
    return [{k: v for k, v in row.items() if k not in empty} for row in rows]


def print_table(result: dict) -> None:
    from rich.table import Table

    from ..report.diff import diff_rows
    out = rich_console()
    if not out.is_terminal:
        out.width = max(out.width, PIPE_WIDTH)
    out.print(f"A {result['a']}: {result['seconds_a']:.2f} s; "
              f"B {result['b']}: {result['seconds_b']:.2f} s of CPU time; cells are A → B")
    rows = without_dashes(diff_rows(result))
    table = Table(title="phases paired by profile distance")
    for name in (rows[0] if rows else {"A": "", "B": ""}):
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*row.values())
    out.print(table)
    if result["nearest_distance"] is not None:
        out.print(f"nothing paired: the nearest phases of A and B are "
                  f"{result['nearest_distance']:.3f} apart, beyond the threshold "
                  f"{result['threshold']:.3f} (a larger --threshold pairs them)")
        for path in result["unmapped"]:
            out.print(f"{path} recorded no mappings of its code (the program ended before they "
                      f"were read): its samples are compared by address, not by function")
    changed = [p for p in result["pairs"] if p["changed"]]
    out.print(f"changed (*): {len(changed)} of {len(result['pairs'])} "
              f"(seconds off by more than {100 * result['tolerance']:.0f} %, "
              f"in phases of at least {100 * result['min_share']:.0f} % of a run)")
