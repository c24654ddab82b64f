"""What ``phasewatch run`` tells at the end: the header, the source line,
the phase table with each phase's energy and top functions, and the same as
JSON."""

from __future__ import annotations

from ..collectors.registry import CHOICES
from ..core.settings import detector_label
from ..formats.results import finite, summary_dict
from .tables import SHOWN_SHARE, kernel_column, phase_table, prediction_line, summary_lines

TOP_FUNCTIONS = 3


def run_json(result) -> dict:
    """``run --json``: the run, its summary, and each phase's top functions and energy."""
    out = {**result.info, **summary_dict(result.summary, result.stats, None)}
    out.pop("ari")
    for row in out["phases"]:
        row["name"] = result.names.get(row["phase"])
        top = result.functions.top(row["phase"], TOP_FUNCTIONS)
        row["top_functions"] = [{"name": name, "share": share} for name, share in top]
        row["kernel_share"] = (result.functions.kernel_share(row["phase"])
                               if result.info.get("kernel_sampled") else None)
        row.update(result.energy.get(row["phase"], {}) if result.energy is not None else {})
    out["prediction"] = result.prediction
    return finite(out)


def run_lines(result, width: int | None = None) -> list:
    """The summary for a terminal: lines and the table (rich renderables),
    the table fitted to ``width`` columns."""
    info, stats, summary = result.info, result.stats, result.summary
    tops = [result.functions.top(row["phase"], TOP_FUNCTIONS, min_share=SHOWN_SHARE)
            for row in summary.table()]
    energy_columns = energy_cells(summary, result.energy) if result.energy is not None else {}
    if info.get("kernel_sampled"):
        energy_columns = {**kernel_column(kernel_shares(summary, result.functions)),
                          **energy_columns}
    end = f"exit status {info['exit_status']}"
    if info["interrupted"]:
        end = "interrupted, " + end
    lines = [f"{' '.join(info['command'])}: {end}, {info['seconds']:.1f} s, "
             f"{stats.samples:,} samples, {summary.n_intervals} intervals "
             f"{stats.interval}, detector "
             f"{detector_label(info['detector'], info.get('detector_chosen'))}, "
             f"threshold {stats.threshold:.3f}",
             source_line(info["source"], info["not_taken"], info["register_rate"],
                         info.get("kernel_sampled"))]
    if info["missing_signals"]:
        lines.append("missing on this host: " + ", ".join(info["missing_signals"]))
    lines.append(phase_table(summary, extra_columns=energy_columns, names=result.names,
                             functions=tops, width=width))
    lines += summary_lines(summary, stats.dropped, stats.implausible)
    if result.prediction:
        lines.append(prediction_line(result.prediction))
    lost = info["samples_lost"]
    if lost["ring"] or lost["queue"]:
        lines.append(f"samples lost: {lost['ring']} in the kernel ring buffers, "
                     f"{lost['queue']} in the agent's queue")
    if info["trace"]:
        lines.append(f"trace: {info['trace']}")
    return lines


def kernel_shares(summary, functions) -> list[float | None]:
    """Each phase's share of samples in kernel mode."""
    return [functions.kernel_share(row["phase"]) for row in summary.table()]


def energy_cells(summary, energy: dict) -> dict[str, list[str]]:
    rows = [energy.get(row["phase"], {}) for row in summary.table()]
    per_100m = [r.get("energy_j_per_100m") for r in rows]
    cells = {"energy J": [f"{r['energy_j']:.2f}" if "energy_j" in r else "-" for r in rows]}
    if any(v is not None for v in per_100m):
        cells["J/100M"] = [f"{v:.3f}" if v is not None else "-" for v in per_100m]
    return cells


def source_line(source: str, not_taken: dict[str, str], register_rate: dict | None,
                kernel: bool | None = None) -> str:
    """``source: msr (registers at 250 Hz ...), user mode only; not taken:
    kmod; not counted: cycles`` (the reasons are in --json and in 'phasewatch
    probe').  ``kernel``: whether kernel mode was sampled (None: unknown)."""
    sources = [name for name in not_taken if name in CHOICES]
    counters = [name for name in not_taken if name not in CHOICES]
    mode = {True: ", user and kernel mode", False: ", user mode only", None: ""}[kernel]
    parts = [f"source: {source}" + (f" ({register_rate['said']})" if register_rate else "")
             + mode]
    parts += [f"not taken: {', '.join(sources)}"] if sources else []
    parts += [f"not counted: {', '.join(counters)}"] if counters else []
    why = " (why: phasewatch probe)" if not_taken else ""
    return "; ".join(parts) + why
