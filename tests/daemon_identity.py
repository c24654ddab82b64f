"""A ``comm:`` target under phasewatchd with its phase catalogue: the
sequence program (tests/workloads/sequence.c) run under a name of its own,
its phases read from the daemon's ZeroMQ interval events (id and name).
Shared by the identity tests and ``benchmarks/bench_identity.py --daemon``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import zmq

from daemonutil import Daemon

PARTS = ("fa", "fb")


def own_copy(sequence: Path, folder: Path) -> Path:
    """The program under a name no other process on the host has (its comm)."""
    copy = folder / f"pwseq{uuid.uuid4().hex[:8]}"
    shutil.copy2(sequence, copy)
    return copy


def config(folder: Path, program: Path, catalog: Path | None, extra: str = "") -> Path:
    path = folder / f"daemon-{uuid.uuid4().hex[:6]}.toml"
    where = f'[catalog]\npath = "{catalog}"\n' if catalog else "[catalog]\nenabled = false\n"
    path.write_text(f'[source]\nkind = "perf"\n[targets]\ncpus = []\n'
                    f'commands = ["{program.name}"]\nrescan_seconds = 0.2\n'
                    f'[detector]\nname = "vpf-ip"\n{where}{extra}')
    return path


class Watched:
    """phasewatchd watching ``program`` by command name, and a subscriber
    to its interval events."""

    def __init__(self, conf: Path):
        self.daemon = Daemon("--config", conf)
        self.ctx = zmq.Context()
        self.sub = None

    def __enter__(self) -> "Watched":
        self.daemon.wait_ready()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.connect(self.daemon.zmq)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, "interval.comm:")
        time.sleep(0.3)             # the subscription reaches the publisher
        return self

    def run(self, program: Path, order: str, seconds: float = 1.0) -> dict[str, set[int]]:
        """One run of the program: each phase name's ids in the daemon's events."""
        proc = subprocess.run([str(program), order, str(seconds)], capture_output=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        return self.drain(f"comm:{program.name}")

    def drain(self, target: str, quiet_s: float = 1.5, first_s: float = 60.0
              ) -> dict[str, set[int]]:
        """Each phase name's ids in the target's events, until none came for
        ``quiet_s`` (and the first came, within ``first_s``: kernels that are
        not compiled ahead of time take a while on a first batch)."""
        ids: dict[str, set[int]] = {}
        start = last = time.monotonic()
        while time.monotonic() - last < quiet_s or (not ids and time.monotonic() - start < first_s):
            if not self.sub.poll(100):
                continue
            topic, body = self.sub.recv_multipart()
            event = json.loads(body)
            if event["target"] == target or event["target"].startswith(target + ":"):
                ids.setdefault(event["name"], set()).add(event["phase"])
                last = time.monotonic()
        return ids

    def stop(self) -> tuple[int, str]:
        if self.sub is not None:
            self.sub.close(0)
            self.sub = None
        self.ctx.term()
        return self.daemon.stop()

    def __exit__(self, *exc):
        self.stop()


def parts(ids: dict[str, set[int]]) -> dict[str, int] | None:
    """fa's and fb's id, where each had exactly one."""
    if not all(len(ids.get(p, ())) == 1 for p in PARTS):
        return None
    return {p: next(iter(ids[p])) for p in PARTS}


def one_try(sequence: Path, folder: Path, orders=("AB", "BA", "AB")) -> tuple[bool, list]:
    """A fresh catalogue; a run, the program restarted, the daemon restarted
    and a run again.  Whether fa and fb kept their ids and names throughout."""
    folder.mkdir(parents=True, exist_ok=True)
    program = own_copy(sequence, folder)
    conf = config(folder, program, folder / "catalog.sqlite")
    runs = []
    with Watched(conf) as w:
        runs.append(w.run(program, orders[0]))
        runs.append(w.run(program, orders[1]))
    with Watched(conf) as w:
        runs.append(w.run(program, orders[2]))
    os.unlink(program)
    got = [parts(r) for r in runs]
    return all(g is not None and g == got[0] for g in got), runs
