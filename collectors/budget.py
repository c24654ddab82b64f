"""The agent's CPU budget, and the register rate that fits in it.

The agent may take at most :data:`CPU_SHARE` of a core per watched CPU
(0.5 %), everything included.  IP sampling and the pipeline take most of
that (benchmarks/bench_run.py); the register sampler gets at most
:data:`REGISTER_SHARE`, and less where the rest of the agent, measured while
it runs, leaves less of :data:`CPU_SHARE` (:func:`register_share`).  A sampler tick costs a wake-up plus one read per
register per CPU (an inter-processor interrupt each, for another CPU's MSR),
so with many CPUs, or on a virtual machine where the timer itself is costly,
1 kHz does not fit: the rate is lowered to the highest of :data:`RATES_HZ`
that does, and the reason is kept for ``probe``, ``run`` and the metrics.
A tick costs more the longer the sampler sleeps between ticks (colder caches,
a deeper idle state to leave), so the sampler goes on measuring its own CPU
time while it runs and lowers the rate further where it has to.
IP sampling stays at its own rate.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU_SHARE = 0.005
REGISTER_SHARE = 0.002
#: The agent aims this far below CPU_SHARE, so that the spread of its other
#: threads' cost (a batch more or less in a second) does not take it over.
HEADROOM = 0.8
#: What the rest of the agent is taken to cost, per CPU, until the sampler has
#: measured it: about what IP sampling and the pipeline of ``run`` take on
#: one CPU here (benchmarks/bench_run.py), so that the first seconds, when a
#: short command spends much of its run, stay within the budget too.
ASSUMED_REST_SHARE = 0.003
RAISE_MARGIN = 0.8
#: Register rates to choose from, highest first: divisors of 1 kHz, so that a
#: lowered rate still ticks on whole milliseconds.
RATES_HZ = (1000, 500, 250, 200, 100, 50, 25, 20, 10, 5, 2)


@dataclass
class RegisterRate:
    """The rate chosen for ``requested_hz``, and what a tick was measured to
    cost (CPU seconds) at the requested rate and at the chosen one."""

    requested_hz: int
    rate_hz: int
    requested_tick_s: float
    cpus: int
    #: measured at the chosen rate once it has run (0 until then)
    tick_cost_s: float = 0.0
    #: what the budget leaves the sampler, once the rest of the agent is measured
    allowed_share: float = REGISTER_SHARE

    @property
    def lowered(self) -> bool:
        return self.rate_hz < self.requested_hz

    @property
    def share(self) -> float:
        """Share of a core per watched CPU at the chosen rate (as measured
        while running, else as estimated from the requested rate's ticks)."""
        return self.rate_hz * (self.tick_cost_s or self.requested_tick_s) / max(self.cpus, 1)

    @property
    def requested_share(self) -> float:
        return self.requested_hz * self.requested_tick_s / max(self.cpus, 1)

    def describe(self) -> str:
        """``registers at 50 Hz, lowered from 1000 Hz: ...``."""
        said = f"registers at {self.rate_hz} Hz ({100 * self.share:.2f} % of a core per CPU)"
        if not self.lowered:
            return said
        cpus = f"{self.cpus} CPU{'s' if self.cpus != 1 else ''}"
        return (f"{said}, lowered from {self.requested_hz} Hz, which would cost "
                f"{100 * self.requested_share:.2f} % here ({1e6 * self.requested_tick_s:.0f} µs "
                f"a tick for {cpus}; the register sampler may take {100 * self.allowed_share:.2f} %)")

    def as_dict(self) -> dict:
        return {"requested_hz": self.requested_hz, "rate_hz": self.rate_hz,
                "tick_cost_us": round(1e6 * self.tick_cost_s, 2),
                "requested_tick_cost_us": round(1e6 * self.requested_tick_s, 2),
                "cpus": self.cpus, "share_per_cpu": self.share,
                "allowed_share_per_cpu": self.allowed_share, "lowered": self.lowered}


def fitting_rate(requested_hz: int, tick_cost_s: float, cpus: int,
                 share: float = REGISTER_SHARE) -> int:
    """The highest rate up to ``requested_hz`` at which ticks of ``tick_cost_s``
    CPU seconds over ``cpus`` watched CPUs stay within ``share`` of a core per
    CPU; the lowest of :data:`RATES_HZ` where none does."""
    allowed = share * max(cpus, 1) / tick_cost_s if tick_cost_s > 0 else float("inf")
    if requested_hz <= allowed:
        return requested_hz
    fitting = [r for r in RATES_HZ if r <= requested_hz and r <= allowed]
    return fitting[0] if fitting else min(RATES_HZ[-1], requested_hz)


def register_share(rest_share: float = ASSUMED_REST_SHARE,
                   share: float = REGISTER_SHARE) -> float:
    """What the budget leaves the register sampler, at most ``share``, when
    the rest of the agent (IP sampling, the pipeline, its outputs) takes
    ``rest_share`` of a core per CPU."""
    return max(0.0, min(share, HEADROOM * CPU_SHARE - rest_share))


def higher_rate(rate_hz: int, requested_hz: int, used_share: float, share: float) -> int:
    """One step up :data:`RATES_HZ` (not past ``requested_hz``) where ticks
    that took ``used_share`` at ``rate_hz`` would still take at most
    RAISE_MARGIN of ``share`` (a tick costs less at a higher rate, so this
    errs low, and the margin keeps the rate from going back and forth); else
    ``rate_hz``."""
    higher = [r for r in RATES_HZ if rate_hz < r <= requested_hz]
    if not higher or used_share <= 0:
        return rate_hz
    step = higher[-1]
    return step if used_share * step / rate_hz <= RAISE_MARGIN * share else rate_hz


def lower_rate(rate_hz: int, used_share: float, share: float = REGISTER_SHARE) -> int:
    """The rate to go on at when ticks at ``rate_hz`` took ``used_share`` of a
    core per CPU: at least one step down :data:`RATES_HZ`, further in
    proportion (a tick costs more at lower rates, so the next measurement may
    lower it again); ``rate_hz`` itself at the bottom of the ladder."""
    target = rate_hz * share / used_share if used_share > 0 else rate_hz
    lower = [r for r in RATES_HZ if r < rate_hz]
    if not lower:
        return rate_hz
    return next((r for r in lower if r <= target), lower[-1])
