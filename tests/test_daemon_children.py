"""A process target of phasewatchd that starts children, as a shell script,
``make`` or a forking server does: the daemon learns each child's mappings
from perf's own records (as ``run`` does), so a child that lives a moment
is placed in its own code and named, and the mappings of the processes that
ended are let go, so that a target forking thousands keeps bounded memory.
Real perf events, a real daemon, real programs."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import zmq
from daemonutil import Daemon

#: One behaviour in one function, about 0.35 s of a core here per run.
CHURN_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) unsigned long churn(unsigned long n)
{
    unsigned long h = 0x9e3779b97f4a7c15ul;
    for (unsigned long i = 0; i < n; i++) { h ^= h >> 29; h *= 0xbf58476d1ce4e5b9ul; h += i; }
    return h;
}
int main(int argc, char **argv) { printf("%lu\n", churn(strtoul(argv[1], 0, 10))); return 0; }
"""


def script(folder: Path, body: str, shell: str = "/bin/sh") -> Path:
    """An executable script under a name no other process has (its comm),
    that waits for a line on its standard input before ``body``: the
    daemon watches it from its first child on."""
    path = folder / f"pwk{uuid.uuid4().hex[:8]}"
    path.write_text(f"#!{shell}\nread go\n{body}\n")
    path.chmod(0o755)
    return path


def watching(folder: Path, name: str, extra: str = "") -> Daemon:
    """phasewatchd watching command ``name``; ``extra``: more of its ``[detector]``."""
    conf = folder / "daemon.toml"
    conf.write_text(f'[source]\nkind = "perf"\n[targets]\ncpus = []\ncommands = ["{name}"]\n'
                    f'rescan_seconds = 0.2\n[detector]\nname = "vpf-ip"\n{extra}'
                    f'[catalog]\nenabled = false\n')
    return Daemon("--config", conf)


def started(daemon: Daemon, program: Path) -> subprocess.Popen:
    """``program`` started, and let go once the daemon watches it."""
    proc = subprocess.Popen([str(program)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    daemon.wait_metric("phasewatch_phases", lambda v: True, target=f"comm:{program.name}")
    proc.stdin.write(b"go\n")
    proc.stdin.close()
    return proc


def test_a_shell_loop_of_short_children_is_one_phase_named_from_their_code(tmp_path):
    """Six runs of a C program from a shell loop, each a fresh process at
    fresh addresses: one phase (or one and a one-interval transition),
    named from the children's function, not ``[unknown]``."""
    exe = tmp_path / "churn"
    subprocess.run(["gcc", "-O2", "-g", "-o", exe, "-x", "c", "-"], input=CHURN_C, text=True,
                   check=True)
    program = script(tmp_path, f"for i in 1 2 3 4 5 6; do {exe} 250000000; done")
    target = f"comm:{program.name}"
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        with watching(tmp_path, program.name, "interval_ms = 100\n") as daemon:
            daemon.wait_ready()
            sub.connect(daemon.zmq)
            sub.setsockopt_string(zmq.SUBSCRIBE, f"interval.{target}")
            time.sleep(0.3)             # the subscription reaches the publisher
            proc = started(daemon, program)
            assert proc.wait(timeout=180) == 0
            events = drain(sub)
    finally:
        sub.close(0)
        ctx.term()
    intervals = Counter(e["phase"] for e in events if e["phase"] >= 0)
    names = {e["phase"]: e["name"] for e in events}
    assert sum(intervals.values()) >= 12, events     # the loop lasted long enough to judge
    sizes = sorted(intervals.values())
    assert len(sizes) == 1 or (len(sizes) == 2 and sizes[0] == 1), (intervals, names)
    main = intervals.most_common(1)[0][0]
    print(f"{sum(sizes)} intervals: {dict(intervals)}, named {names}")
    assert names[main] == "churn", (intervals, names)


def drain(sub, quiet_s: float = 2.0, first_s: float = 60.0) -> list[dict]:
    """The interval events, until none came for ``quiet_s`` (after the first)."""
    events = []
    start = last = time.monotonic()
    while time.monotonic() - last < quiet_s or (not events and time.monotonic() - start < first_s):
        if sub.poll(100):
            events.append(json.loads(sub.recv_multipart()[1]))
            last = time.monotonic()
    return events


#: Mapping rows a target may keep while thousands of its children come and
#: go: each child has 4 to 6 of them, so this is some 500 children's worth
#: (kept only until it ended: 3000 children's would be over 12000 rows).
ROWS_BOUND = 2500


def test_a_target_forking_thousands_of_children_keeps_its_mappings_bounded(tmp_path):
    """``bash`` running /bin/true 3000 times: every child's mappings come
    from perf's records, and go once it has ended; the rows kept (a gauge
    per target) stay under a bound while thousands come and go."""
    program = script(tmp_path, "for i in $(seq 3000); do /bin/true; done", shell="/bin/bash")
    target = f"comm:{program.name}"
    with watching(tmp_path, program.name) as daemon:
        daemon.wait_ready()
        proc = started(daemon, program)
        rows, processes = [], []
        while proc.poll() is None:
            rows.append(daemon.metric("phasewatch_process_mappings", target=target))
            processes.append(daemon.metric("phasewatch_processes", target=target))
            time.sleep(0.1)
        assert proc.returncode == 0
        exited = daemon.wait_metric("phasewatch_processes_exited_total", lambda v: v >= 2500,
                                    timeout=60, target=target)
        rows.append(daemon.metric("phasewatch_process_mappings", target=target))
    print(f"{exited:.0f} children ended; rows kept at most {max(rows):.0f}, "
          f"processes at most {max(processes):.0f}, over {len(rows)} scrapes")
    assert len(rows) >= 10 and None not in rows, rows
    assert max(rows) < ROWS_BOUND, rows
    assert max(processes) < ROWS_BOUND // 4, processes
