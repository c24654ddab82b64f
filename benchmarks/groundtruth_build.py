"""Run each ground-truth workload under valgrind: exp-bbv for basic-block
vectors and block addresses, callgrind for the per-interval CPI model.

Outputs go to WORKDIR/NAME/ and are kept: a rerun skips what is there.
"""

from __future__ import annotations

import os
import subprocess
import sys

from groundtruth_workloads import BY_NAME, WORKLOADS, Workload, available, write_input

#: callgrind dumps every this many basic blocks (~10M instructions): the CPI
#: model of an interval is pieced together from the dumps it overlaps.
DUMP_EVERY_BB = 2_000_000


def paths(workdir: str, w: Workload) -> dict[str, str]:
    d = os.path.join(workdir, w.name)
    return {"dir": d, "input": os.path.join(d, "input"), "out": os.path.join(d, "out.s"),
            "bb": os.path.join(d, "bbv.bb"), "pc": os.path.join(d, "bbv.pc"),
            "vglog": os.path.join(d, "valgrind.log"), "cg": os.path.join(d, "callgrind.out"),
            "stdout": os.path.join(d, "stdout")}


def argv(w: Workload, p: dict[str, str]) -> list[str]:
    return [a.replace("{input}", p["input"]).replace("{out}", p["out"]).replace("{dir}", p["dir"])
            for a in w.argv]


def build(w: Workload, workdir: str, interval: int, callgrind: bool = True) -> dict[str, str]:
    p = paths(workdir, w)
    os.makedirs(p["dir"], exist_ok=True)
    if not os.path.exists(p["input"]):
        write_input(w, p["input"] + ".tmp")
        os.replace(p["input"] + ".tmp", p["input"])
    if not os.path.exists(p["bb"]):
        run(["valgrind", "--tool=exp-bbv", f"--interval-size={interval}",
             f"--bb-out-file={p['bb']}.tmp", f"--pc-out-file={p['pc']}",
             "--trace-symtab=yes", f"--log-file={p['vglog']}"] + argv(w, p), p["stdout"])
        os.replace(p["bb"] + ".tmp", p["bb"])
        for f in os.listdir(p["dir"]):          # one file per further thread
            if f.startswith("bbv.bb.tmp."):
                os.replace(os.path.join(p["dir"], f),
                           os.path.join(p["dir"], f.replace(".tmp", "")))
    done = p["cg"] + ".done"
    if callgrind and not os.path.exists(done):
        run(["valgrind", "--tool=callgrind", "--cache-sim=yes", "--branch-sim=yes",
             f"--dump-every-bb={DUMP_EVERY_BB}", "--dump-instr=no", "--dump-line=no",
             "--compress-strings=no", "--compress-pos=no", f"--callgrind-out-file={p['cg']}",
             f"--log-file={p['vglog']}.callgrind"]
            + (["--separate-threads=yes"] if w.threads > 1 else []) + argv(w, p), p["stdout"])
        open(done, "w").close()
    return p


def run(cmd: list[str], stdout: str) -> None:
    """``cmd`` with its standard output to the file ``stdout``: not to
    /dev/null, where GNU grep stops at the first match (it acts as -q)."""
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    with open(stdout, "wb") as out:
        subprocess.run(cmd, check=True, stdout=out)
    os.remove(stdout)


def main() -> int:
    """groundtruth_build.py WORKDIR [--bbv-only] [NAME ...]: the valgrind runs
    of the workloads named (default: all), one after another."""
    args = sys.argv[1:]
    bbv_only = "--bbv-only" in args
    args = [a for a in args if a != "--bbv-only"]
    workdir, names = args[0], args[1:] or [w.name for w in WORKLOADS]
    failed = 0
    for name in names:
        w = BY_NAME[name]
        why = available(w)
        if why:
            print(f"skipping {w.name}: {why}", file=sys.stderr)
            continue
        try:
            build(w, workdir, 100_000_000, callgrind=not bbv_only)
        except subprocess.CalledProcessError as e:
            print(f"{w.name} failed: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
