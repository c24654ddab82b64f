"""Energy per phase from RAPL, on a fake powercap tree (no RAPL here): a
thread advances a package counter at one rate, then another, wrapping it
several times, and each phase's energy must come within 2 % of what it
wrote, although the meter reads it only every 500 ms and the phases change
inside its reading windows.
Then ``run --powercap-root`` on the real A/B/A program with a counter at a
steady rate: each phase's joules are, within 5 %, what the writer put in
during its intervals, and the run's, within 2 %, what the counter rose by."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from test_run import phasewatch

from phasewatch.core.pipeline import Intervals
from phasewatch.errors import UserError
from phasewatch.live.phase_energy import EnergyMeter, PhaseEnergy

MAX_RANGE_UJ = 30_000_000      # 30 J: at 45 W the counter wraps every 0.67 s
WRITE_EVERY_S = 0.001
#: 2.25 of the meter's 500 ms reading windows a part of ten intervals
INTERVAL_S = 0.1125


def fake_tree(root, max_range_uj=MAX_RANGE_UJ):
    zone = root / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    (zone / "energy_uj").write_text("0\n")
    return zone


class CounterWriter:
    """Advances ``energy_uj`` at ``watts`` (changeable), as the hardware would:
    the true total is kept exactly, the file holds it modulo the range."""

    def __init__(self, zone, watts: float, max_range_uj=MAX_RANGE_UJ, start_uj: int = 0):
        self.zone, self.watts, self.max_range_uj = zone, watts, max_range_uj
        self.start_uj = start_uj
        self.total_uj = 0.0
        self.history = [(time.monotonic_ns(), 0.0)]    # (time, true total) at each write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        last = time.monotonic_ns()
        while not self._stop.wait(WRITE_EVERY_S):
            now = time.monotonic_ns()
            self.total_uj += self.watts * (now - last) / 1e3
            last = now
            tmp = self.zone / ".energy_uj.new"
            tmp.write_text(f"{(self.start_uj + int(self.total_uj)) % self.max_range_uj}\n")
            tmp.replace(self.zone / "energy_uj")
            self.history.append((now, self.total_uj))

    def true_uj(self, t0: int, t1: int) -> float:
        t, uj = np.array(self.history).T
        return float(np.interp(t1, t, uj) - np.interp(t0, t, uj))

    def counted_uj(self, t0: int, t1: int) -> float:
        """What the counter rose by between two times: the file holds the
        total of the latest write (on a loaded host the writer can fall tens
        of milliseconds behind the clock, as RAPL's own updates never do)."""
        t, uj = np.array(self.history).T
        at = np.searchsorted(t, [t0, t1], side="right") - 1
        return float(uj[at[1]] - uj[at[0]])


def intervals(bounds_ns, phases) -> Intervals:
    n = len(phases)
    z = np.zeros(n)
    return Intervals(index=np.arange(n), t_start_ns=np.array(bounds_ns[:-1], np.int64),
                     t_end_ns=np.array(bounds_ns[1:], np.int64),
                     instructions=np.full(n, 200_000_000, np.int64), cycles=z.astype(np.int64),
                     samples=np.full(n, 100, np.int64), distance=z, phase=np.array(phases),
                     new_phase=np.zeros(n, bool), voltage_mv=z + np.nan, pfreq_mhz=z + np.nan)


def test_each_phases_energy_is_within_2_percent_of_what_the_counter_was_given(tmp_path):
    zone = fake_tree(tmp_path)
    meter = EnergyMeter.open(str(tmp_path)).start()
    sink = PhaseEnergy(meter)
    with CounterWriter(zone, watts=15.0) as writer:
        bounds = [time.monotonic_ns()]
        for phase, watts in ((0, 15.0), (1, 45.0), (0, 15.0)):
            writer.watts = watts
            for _ in range(10):         # 1.125 s a part: it changes mid-window
                time.sleep(INTERVAL_S)
                bounds.append(time.monotonic_ns())
        phases = [0] * 10 + [1] * 10 + [0] * 10
        sink.write(intervals(bounds, phases))
        time.sleep(0.6)     # a reading after the last interval
        sink.finish()
    got = sink.per_phase()
    for phase in (0, 1):
        true = sum(writer.true_uj(bounds[i], bounds[i + 1])
                   for i, p in enumerate(phases) if p == phase) / 1e6
        assert got[phase]["energy_j"] == pytest.approx(true, rel=0.02), (phase, got, true)
        instructions = 200_000_000 * phases.count(phase)
        assert got[phase]["energy_j_per_100m"] == pytest.approx(true * 1e8 / instructions,
                                                                rel=0.02)
    assert writer.total_uj > 2 * MAX_RANGE_UJ     # the counter wrapped, more than once
    assert got[1]["energy_j"] / 10 > 2.5 * got[0]["energy_j"] / 20


def test_no_package_zone_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="no RAPL package zone"):
        EnergyMeter.open(str(tmp_path))


@pytest.mark.slow
def test_run_gives_each_phase_its_joules_in_the_summary_and_the_profile(abab, tmp_path):
    # A counter 1.5 s short of its wrap, which then comes every 33 s (RAPL's
    # own, after minutes at full power): a meter thread held up for a while
    # at start-up still reads it within every wrap.
    range_uj, watts = 1_000_000_000, 30.0
    zone = fake_tree(tmp_path / "powercap", range_uj)
    start_uj = range_uj - int(1.5 * watts * 1e6)
    with CounterWriter(zone, watts=watts, max_range_uj=range_uj, start_uj=start_uj) as writer:
        proc = phasewatch("run", "--json", tmp_path / "summary.json",
                          "--detector", "vpf-ip", "--interval-samples", 200,
                          "--powercap-root", tmp_path / "powercap", "--output",
                          tmp_path / "r.jsonl", "--pprof", tmp_path / "p.pb.gz",
                          "--record", tmp_path / "t.arrow", "--", abab, "1")
    assert proc.returncode == 0, proc.stderr
    assert start_uj + writer.total_uj > range_uj        # wrapped
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    last_end_unix_ns = rows[-1]["t_end_ns"] + summary["realtime_offset_ns"]   # wall clock
    assert time.time_ns() - 120e9 < last_end_unix_ns < time.time_ns()
    # A phase of one or two intervals lies within one or two of the meter's
    # 500 ms windows, so its energy is estimated, not read; and on a loaded
    # host the writer stalls, so the counter's steps are not its power: 5 %
    # per phase here (test_each_phases_energy_... holds the 2 %), and the
    # energy of the whole run as the counter had it.
    for phase in summary["phases"]:
        written_j = sum(writer.true_uj(r["t_start_ns"], r["t_end_ns"]) for r in rows
                        if r["phase"] == phase["phase"]) / 1e6
        assert phase["energy_j"] == pytest.approx(written_j, rel=0.05), phase
    counted_j = sum(writer.counted_uj(r["t_start_ns"], r["t_end_ns"]) for r in rows) / 1e6
    assert sum(p["energy_j"] for p in summary["phases"]) == pytest.approx(counted_j, rel=0.02)
    from phasewatch.formats.pprof import read_profile
    profile = read_profile(str(tmp_path / "p.pb.gz"))
    types = [profile.string_table[t.type] for t in profile.sample_type]
    assert types == ["samples", "cpu", "energy"]
    total_uj = sum(s.value[2] for s in profile.sample)
    assert total_uj / 1e6 == pytest.approx(sum(p["energy_j"] for p in summary["phases"]), rel=0.01)

    # The recording keeps each interval's energy beside it, for diff.
    diff = phasewatch("diff", tmp_path / "t.arrow", tmp_path / "t.arrow", "--json",
                      "--detector", "vpf-ip", "--interval-samples", 200)
    assert diff.returncode == 0, diff.stderr
    by_phase = {p["phase"]: p["energy_j"] for p in summary["phases"]}
    for pair in json.loads(diff.stdout)["pairs"]:
        assert pair["phase_a"] == pair["phase_b"]
        assert pair["energy_j_a"] == pair["energy_j_b"] == pytest.approx(by_phase[pair["phase_a"]])
    # Intervals cut otherwise match no row of the table: energy unknown.
    other = phasewatch("diff", tmp_path / "t.arrow", tmp_path / "t.arrow", "--json",
                       "--detector", "vpf-ip", "--interval-samples", 150)
    assert other.returncode == 0, other.stderr
    assert all(p["energy_j_a"] is None for p in json.loads(other.stdout)["pairs"])
    # and replay's profile takes it as the live run's did
    rp = phasewatch("replay", tmp_path / "t.arrow", "--detector", "vpf-ip", "--interval-samples",
                    200, "--pprof", tmp_path / "replay.pb.gz")
    assert rp.returncode == 0, rp.stderr
    replayed = read_profile(str(tmp_path / "replay.pb.gz"))
    assert sum(s.value[2] for s in replayed.sample) == total_uj


def test_the_daemons_energy_is_dropped_with_its_phase_and_its_target(tmp_path):
    """Keyed by the daemon's stable ids: a phase retired for good takes its
    joules and its learnt power with it, a target gone takes all of its, and
    a target whose process ended and came back splits windows afresh."""
    zone = fake_tree(tmp_path)
    meter = EnergyMeter.open(str(tmp_path))
    sink = PhaseEnergy(meter, one_run=False)
    t0 = time.monotonic_ns()
    for k, uj in enumerate((0, 1_000_000, 3_000_000)):      # readings 100 ms apart
        (zone / "energy_uj").write_text(f"{uj}\n")
        meter.read()
        meter._t[-1] = t0 + k * 100_000_000
    step = 100_000_000
    for target in ("comm:a", "comm:b"):
        sink.write(intervals([t0, t0 + step, t0 + 2 * step], [7, 9]), target)
    sink.end(["comm:a", "comm:b"])
    sink.settle(final=True)
    assert set(sink.joules()) == {("comm:a", 7), ("comm:a", 9), ("comm:b", 7), ("comm:b", 9)}
    assert 7 in sink._targets["comm:a"].power
    sink.drop("comm:a", [7])
    assert set(sink.joules()) == {("comm:a", 9), ("comm:b", 7), ("comm:b", 9)}
    assert 7 not in sink._targets["comm:a"].power
    # comm:b's process came back: its windows wait for its intervals again.
    later = t0 + 10 * step
    sink.write(intervals([later, later + step], [9]), "comm:b")
    assert sink._targets["comm:b"].known_until == later + step
    sink.forget(["comm:a"])
    assert "comm:a" not in sink._targets
    assert {t for t, _ in sink.joules()} == {"comm:b"}
