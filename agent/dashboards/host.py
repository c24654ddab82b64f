"""The host dashboard: what the CPUs did, what the package drew, how the daemon fares."""

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap, timeseries
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.common import HeatmapCellLayout
from grafana_foundation_sdk.models.heatmap import HeatmapColorMode, HeatmapColorScale

from .common import (CPU, DATASOURCE, HOST, cpu_variable, graph, grid, heatmap_query,
                     host_variable, numbered, query)

UID = "phasewatch-host"

SAMPLES_PER_SECOND = "suffix: samples/s"
MESSAGES_PER_SECOND = "suffix: messages/s"


def _per_cpu(title: str, metric: str, unit: str, description: str, x: int, y: int
             ) -> timeseries.Panel:
    return (
        graph(title, description, unit, grid(x, y, 8, 8))
        .with_target(query(f"{metric}{{{HOST}, {CPU}}}", "{{instance}} cpu {{cpu}}"))
    )


def _heatmap(title: str, metric: str, unit: str, description: str, x: int, y: int
             ) -> heatmap.Panel:
    return (
        heatmap.Panel().title(title).description(description).datasource(DATASOURCE)
        .unit(SAMPLES_PER_SECOND).grid_pos(grid(x, y, 12, 9))
        .with_target(heatmap_query(
            f"sum by (le) (rate({metric}_bucket{{{HOST}}}[$__rate_interval]))"))
        .calculate(False)
        .rows_frame(heatmap.RowsHeatmapOptions().layout(HeatmapCellLayout.LE))
        .y_axis(heatmap.YAxisConfig().unit(unit))
        .cell_values(heatmap.CellValues().unit(SAMPLES_PER_SECOND))
        .color(heatmap.HeatmapColorOptions().mode(HeatmapColorMode.SCHEME)
               .scheme("Spectral").scale(HeatmapColorScale.EXPONENTIAL).exponent(0.5)
               .steps(64).fill("dark-orange").reverse(False))
        .show_legend()
    )


def _cstates(y: int) -> timeseries.Panel:
    return (
        graph("C-state residency",
              "Share of time the selected CPUs spent in each C-state, averaged "
              "over the CPUs; C1 is halted time not spent in a deeper state.",
              "percentunit", grid(0, y, 12, 8)).min(0).max(1)
        .fill_opacity(60)
        .stacking(common_builders.StackingConfig().mode(common_models.StackingMode.NORMAL))
        .with_target(query(
            f"avg by (instance, state) (phasewatch_cpu_cstate_residency_ratio{{{HOST}, {CPU}}})",
            "{{instance}} {{state}}"))
    )


def _package_power(y: int) -> timeseries.Panel:
    return (
        graph("Package power",
              "RAPL package energy counter as a rate: joules per second are watts.",
              "watt", grid(12, y, 12, 8)).min(0)
        .with_target(query(
            f"rate(phasewatch_package_energy_joules_total{{{HOST}}}[$__rate_interval])",
            "{{instance}} package {{package}}"))
    )


def _samples(y: int) -> timeseries.Panel:
    return (
        graph("Samples taken and dropped",
              "Samples the daemon took, and those lost in the source or its queue.",
              SAMPLES_PER_SECOND, grid(0, y, 6, 8)).min(0)
        .with_target(query(f"rate(phasewatch_samples_total{{{HOST}}}[$__rate_interval])",
                           "{{instance}} taken", "A"))
        .with_target(query(
            f"rate(phasewatch_samples_dropped_total{{{HOST}}}[$__rate_interval])",
            "{{instance}} dropped", "B"))
    )


def _event_drops(y: int) -> timeseries.Panel:
    return (
        graph("Events missed by slow subscribers",
              "ZeroMQ messages dropped at the high-water mark; sampling never waits.",
              MESSAGES_PER_SECOND, grid(6, y, 6, 8)).min(0)
        .with_target(query(
            f"rate(phasewatch_zmq_dropped_messages_total{{{HOST}}}[$__rate_interval])",
            "{{instance}}"))
    )


def _sampler_lag(y: int) -> timeseries.Panel:
    return (
        graph("Sampler lag",
              "How far the newest processed sample lags behind now.",
              "s", grid(12, y, 6, 8)).min(0)
        .with_target(query(f"phasewatch_sampler_lag_seconds{{{HOST}}}", "{{instance}}"))
    )


def _daemon_cpu(y: int) -> timeseries.Panel:
    return (
        graph("Daemon CPU",
              "The daemon's own CPU time, all threads, as a share of one CPU.",
              "percentunit", grid(18, y, 6, 8)).min(0)
        .fill_opacity(40)
        .stacking(common_builders.StackingConfig().mode(common_models.StackingMode.NORMAL))
        .with_target(query(
            f"sum by (instance, mode) "
            f"(rate(phasewatch_agent_cpu_seconds_total{{{HOST}}}[$__rate_interval]))",
            "{{instance}} {{mode}}"))
    )


def build() -> model.Dashboard:
    return numbered(
        dash.Dashboard("phasewatch: host").uid(UID).tags(["phasewatch"])
        .description("Core voltage, frequencies, C-states and package power per host, "
                     "and the health of the phasewatch daemon.")
        .time("now-15m", "now").refresh("10s").timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR).readonly()
        .with_variable(host_variable()).with_variable(cpu_variable())
        .link(dash.DashboardLink("phasewatch").type(model.DashboardLinkType.DASHBOARDS)
              .tags(["phasewatch"]).as_dropdown(False).include_vars(True).keep_time(True))
        .with_row(dash.Row("Per CPU").grid_pos(grid(0, 0, 24, 1)))
        .with_panel(_per_cpu("Core voltage", "phasewatch_core_voltage_volts", "volt",
                             "Core voltage read from IA32_PERF_STATUS.", 0, 1))
        .with_panel(_per_cpu("Frequency", "phasewatch_cpu_frequency_hertz", "hertz",
                             "Base frequency times dAPERF/dMPERF.", 8, 1))
        .with_panel(_per_cpu("Productive frequency",
                             "phasewatch_cpu_productive_frequency_hertz", "hertz",
                             "Base frequency times dPPERF/dMPERF: the cycles that were "
                             "not stalled.", 16, 1))
        .with_row(dash.Row("Every sample").grid_pos(grid(0, 9, 24, 1)))
        .with_panel(_heatmap("Core voltage, every sample", "phasewatch_core_voltage_sample_volts",
                             "volt", "Distribution of every sample's core voltage over "
                             "time, all CPUs of the selected hosts.", 0, 10))
        .with_panel(_heatmap("Productive frequency, every sample",
                             "phasewatch_productive_frequency_sample_hertz", "hertz",
                             "Distribution of every sample's productive frequency over "
                             "time, all CPUs of the selected hosts.", 12, 10))
        .with_row(dash.Row("Idle states and power").grid_pos(grid(0, 19, 24, 1)))
        .with_panel(_cstates(20))
        .with_panel(_package_power(20))
        .with_row(dash.Row("Daemon").grid_pos(grid(0, 28, 24, 1)))
        .with_panel(_samples(29))
        .with_panel(_event_drops(29))
        .with_panel(_sampler_lag(29))
        .with_panel(_daemon_cpu(29))
        .build()
    )
