"""The daemon's live sources, opened from the one source registry.

Targets become sources: the CPUs system-wide are one source (its rows routed
to one pipeline per CPU), and each watched process is a source of its own
(its threads' samples, one pipeline).  Processes named by command or cgroup
are looked for again every ``rescan_seconds``, so one started later is
watched too.  A process target that ends leaves the metrics after the grace
period.
"""

from __future__ import annotations

import os

import psutil

from ..collectors.cpuinfo import base_frequency_hz, read_cpuinfo
from ..collectors.registry import open_source
from ..core.params import HistogramParams
from ..errors import UserError
from ..formats import metadata as md

CGROUP_ROOT = "/sys/fs/cgroup"


def process_targets(config) -> list[tuple[str, int]]:
    """(target name, pid) for every watched process."""
    found = [(f"pid:{pid}", pid) for pid in config.pids]
    for name in config.commands:
        pids = [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == name]
        found += [(f"comm:{name}" if len(pids) == 1 else f"comm:{name}:{pid}", pid)
                  for pid in pids]
    for path in config.cgroups:
        found += [(f"cgroup:{path}" if i == 0 else f"cgroup:{path}:{pid}", pid)
                  for i, pid in enumerate(cgroup_pids(path))]
    return found


def cgroup_pids(path: str) -> list[int]:
    procs = os.path.join(CGROUP_ROOT, path.lstrip("/"), "cgroup.procs")
    try:
        with open(procs) as f:
            return [int(line) for line in f if line.strip()]
    except FileNotFoundError:
        raise UserError(f"[targets] cgroups: no cgroup {path} (no {procs})") from None


def live_metadata(source) -> dict:
    info = read_cpuinfo()
    model = info.cpu_model()
    base_hz, _ = base_frequency_hz()
    sampled = source.metadata.get("signals", {})
    return md.new(
        cpu={"vendor": info.vendor, "family": info.family, "model": info.model,
             "model_name": info.model_name, "model_key": model.key},
        base_freq_mhz=base_hz / 1e6 if base_hz else None,
        signals={name: sampled.get(name, "") for name in source.signals},
        histograms=HistogramParams.for_model(model),
        sampling=source.metadata,
        counter_scope=source.metadata.get("counter_scope", "cpu"))


def open_process(config, target: str, pid: int):
    """(name, source, metadata, signals, target, pid) for one watched process,
    with perf's records of its tree's mappings, execs, forks and exits."""
    source = open_source(config.source, pid=pid, msr_path=config.msr_path,
                         rate_hz=config.rate_hz, task_records=True)
    return target, source, live_metadata(source), tuple(source.signals), target, pid


def open_live(config, warn) -> list[tuple[str, object, dict, tuple, str | None, int | None]]:
    opened = []
    try:
        if config.cpus:
            cpus = None if config.cpus == "all" else list(config.cpus)
            source = open_source(config.source, cpus=cpus, msr_path=config.msr_path,
                                 rate_hz=config.rate_hz)
            opened.append(("cpus", source, live_metadata(source), tuple(source.signals), None,
                           None))
        for target, pid in process_targets(config):
            opened.append(open_process(config, target, pid))
    except BaseException:
        for _, source, *_ in opened:
            source.close()
        raise
    if not opened and not (config.commands or config.cgroups):
        raise UserError("no targets: set [targets] cpus, pids, commands or cgroups")
    return opened
