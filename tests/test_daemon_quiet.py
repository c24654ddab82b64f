"""phasewatchd on a host short of signals, as on this VM: a warning about
the host is said once, with the daemon's own prefix, however many processes
it watches; and a signal no sample has (voltage, productive frequency) is
no histogram of empty buckets in the metrics."""

import subprocess
import time
from pathlib import Path

from daemonutil import Daemon


def test_a_warning_is_said_once_with_one_prefix_and_empty_histograms_are_left_out(tmp_path):
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    config = tmp_path / "pids.toml"
    config.write_text('[source]\nkind = "perf"\n[targets]\ncpus = [0]\n'
                      f'pids = [{", ".join(str(p.pid) for p in sleepers)}]\n'
                      '[detector]\nname = "vpf"\n')
    try:
        with Daemon("--config", config) as d:
            d.wait_ready()
            d.wait_metric("phasewatch_samples_total", lambda v: v > 200)
            time.sleep(1.5)         # a scrape after some seconds of samples
            text = d.metrics_text()
        _, err = d.stop()
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    lines = err.splitlines()
    assert all(line.startswith("phasewatchd: ") for line in lines), err
    warnings = [line for line in lines if "no instruction counts" in line
                or "no core voltage or productive frequency" in line]
    assert len(warnings) == len(set(warnings)), err
    if not Path("/dev/cpu/0/msr").exists():      # no register holds a voltage here
        assert "phasewatch_core_voltage_sample_volts_bucket" not in text
        assert "phasewatch_productive_frequency_sample_hertz_bucket" not in text
        assert sum("no core voltage or productive frequency" in line for line in lines) == 1, err
