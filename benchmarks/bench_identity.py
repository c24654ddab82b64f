"""Phase identity across runs: how often each part of the sequence program
(tests/workloads/sequence.c: fa, fb, fc) keeps its id and name over three
runs sharing one phase catalogue.

    .venv/bin/python benchmarks/bench_identity.py [--tries 10] [--seconds 0.5]
    .venv/bin/python benchmarks/bench_identity.py --daemon [--tries 10]

Each try starts a fresh catalogue and runs the program three times, in the
orders ABCAB, ABCAB, CABAB, then again starting with C (CABAB, ABCAB, BCA).
A try holds where every part has the same id and name in all three runs.

With ``--daemon``, the program runs under phasewatchd as a ``comm:`` target
(its phases read from the daemon's ZeroMQ events): a run, the program
restarted, the daemon restarted and a run again, in the orders AB, BA, AB
and then starting with B (BA, AB, BA).  A try holds where fa and fb keep
their ids and names throughout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDERS = {"A first": ("ABCAB", "ABCAB", "CABAB"), "C first": ("CABAB", "ABCAB", "BCA")}
PARTS = ("fa", "fb", "fc")


def build(folder: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "tests" / "workloads"), f"OUT={folder}",
                    "CC=gcc"], check=True)
    return folder / "sequence"


def one_run(program: Path, order: str, catalog: Path, seconds: float, out: Path) -> dict:
    subprocess.run([str(ROOT / ".venv" / "bin" / "phasewatch"), "run", "-q", "--detector",
                    "vpf-ip", "--catalog", str(catalog), "--json", str(out), "--",
                    str(program), order, str(seconds)], check=True)
    return {row["name"]: row["phase"] for row in json.loads(out.read_text())["phases"]}


DAEMON_ORDERS = {"A first": ("AB", "BA", "AB"), "B first": ("BA", "AB", "BA")}


def daemon_tries(program: Path, tmp: Path, tries: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from daemon_identity import one_try
    for label, orders in DAEMON_ORDERS.items():
        held = 0
        for t in range(tries):
            same, runs = one_try(program, tmp / f"{label}-{t}".replace(" ", "-"), orders)
            held += same
            print(f"{label} try {t + 1}: " + "; ".join(
                ", ".join(f"{n}={sorted(i)}" for n, i in sorted(r.items())) for r in runs)
                + ("" if same else "  <- changed"), flush=True)
        print(f"{label}: {held} of {tries} tries keep fa's and fb's ids and names over a "
              f"program restart and a daemon restart ({', '.join(orders)})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=0.5, help="CPU seconds per letter")
    ap.add_argument("--daemon", action="store_true",
                    help="under phasewatchd: across a program and a daemon restart")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        program = build(tmp)
        if args.daemon:
            daemon_tries(program, tmp, args.tries)
            return 0
        for label, orders in ORDERS.items():
            held = 0
            for t in range(args.tries):
                catalog = tmp / f"{label}-{t}.sqlite"
                runs = [one_run(program, order, catalog, args.seconds, tmp / "out.json")
                        for order in orders]
                same = all(all(p in r for p in PARTS) for r in runs) and all(
                    {p: r[p] for p in PARTS} == {p: runs[0][p] for p in PARTS} for r in runs)
                held += same
                print(f"{label} try {t + 1}: " + "; ".join(
                    ", ".join(f"{n}={i}" for n, i in sorted(r.items())) for r in runs)
                    + ("" if same else "  <- changed"), flush=True)
            print(f"{label}: {held} of {args.tries} tries keep every part's id and name "
                  f"over {len(orders)} runs ({', '.join(orders)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
