"""``phasewatch catalog list|show|export|import|merge``: the phase catalogue.

``run`` keeps each program's phases in the catalogue so that the same
behaviour takes the same id and name in every run.  These commands show it
and move it between hosts: ``export`` writes it as JSON, ``import`` takes
such a file, ``merge`` another catalogue file; what comes in wins (its ids
and names), so that hosts whose catalogues were merged name alike.
"""

from __future__ import annotations

import json
import sys
import time

from rich.table import Table

from ..console import rich_console
from ..core.params import DEFAULT_THRESHOLD
from ..errors import UserError
from ..formats.catalog import Catalog, default_path, dumps
from ..formats.inputs import read_text
from ..formats.outputs import Database, open_output
from .arguments import number


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=("list", "show", "export", "import", "merge"),
                        help="list the programs; show one program's phases; export as JSON; "
                             "import a JSON export; merge another catalogue file")
    parser.add_argument("what", nargs="?", metavar="ARG",
                        help="show: the program (its path, or the key 'list' gives); "
                             "export: the JSON file ('-' or none: stdout); import: the JSON "
                             "file; merge: the other catalogue file")
    parser.add_argument("--catalog", metavar="FILE",
                        help="the catalogue (default $XDG_STATE_HOME/phasewatch/catalog.sqlite)")
    parser.add_argument("--threshold", type=number(float, 0.0, 1.0), default=DEFAULT_THRESHOLD,
                        help="import and merge: a phase here this near one coming in is "
                             f"taken as the same (default {DEFAULT_THRESHOLD})")


def run(args) -> int:
    path = args.catalog or str(default_path())
    if args.action in ("show", "import", "merge") and not args.what:
        raise UserError(f"catalog {args.action} needs its argument (see --help)")
    writing = args.action in ("import", "merge")
    catalog = Catalog(path, warn=_refuse, create=writing)
    try:
        return ACTIONS[args.action](catalog, args)
    finally:
        catalog.close()


def _refuse(line: str) -> None:
    raise UserError(line)


def list_programs(catalog: Catalog, args) -> int:
    table = Table(title=f"programs in {catalog.path}", title_justify="left")
    for name in ("program", "detector", "phases", "next id", "last seen", "key"):
        table.add_column(name)
    for p in catalog.programs():
        table.add_row(p["path"], p["profile"].partition(":")[0], str(p["phases"]),
                      str(p["next_id"]), _when(p["last_seen"]), p["program"])
    rich_console().print(table)
    return 0


def show(catalog: Catalog, args) -> int:
    programs = [p for p in catalog.programs() if args.what in (p["path"], p["program"], p["key"])]
    if not programs:
        raise UserError(f"{args.what}: no such program in {catalog.path} "
                        f"(phasewatch catalog list names them)")
    for prog in programs:
        table = Table(title=f"{prog['path']} ({prog['profile'].partition(':')[0]})",
                      title_justify="left")
        for name in ("phase", "name", "intervals", "first seen", "last seen"):
            table.add_column(name)
        for p in catalog.phases(prog["key"]):
            table.add_row(str(p.known.id), p.name, str(p.intervals), _when(p.first_seen),
                          _when(p.last_seen))
        rich_console().print(table)
    return 0


def export(catalog: Catalog, args) -> int:
    text = dumps(catalog.export()) + "\n"
    if args.what in (None, "-"):
        sys.stdout.write(text)
        return 0
    with open_output(args.what, inputs=[Database(catalog.path)]) as out:
        out.stream.write(text)
    if out.failure:
        raise UserError(out.failure)
    return 0


def import_export(catalog: Catalog, args) -> int:
    try:
        data = json.loads(read_text(args.what, "catalogue export"))
    except ValueError as exc:
        raise UserError(f"{args.what}: not a catalogue export ({exc})") from None
    return _merged(catalog, data, args)


def merge(catalog: Catalog, args) -> int:
    other = Catalog.for_reading(args.what, "give another phase catalogue file to merge")
    try:
        data = other.export()
    finally:
        other.close()
    return _merged(catalog, data, args)


def _merged(catalog: Catalog, data, args) -> int:
    if not isinstance(data, dict):
        raise UserError(f"{args.what}: not a catalogue export")
    programs, phases = catalog.merge(data, args.threshold)
    print(f"{catalog.path}: {phases} phases of {programs} programs taken from {args.what}")
    return 0


def _when(t) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


ACTIONS = {"list": list_programs, "show": show, "export": export, "import": import_export,
           "merge": merge}
