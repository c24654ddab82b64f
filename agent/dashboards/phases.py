"""The phases dashboard: which phase each target is in, how often it changes, where time goes."""

from grafana_foundation_sdk.builders import bargauge, statetimeline, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as model

from .common import (DATASOURCE, HOST, TARGET, graph, grid, host_variable, instant_query,
                     numbered, query, target_variable)

UID = "phasewatch-phases"

SELECT = f"{HOST}, {TARGET}"
# Grafana's classic palette, cycled over phase ids so that neighbours differ.
PALETTE = ["green", "yellow", "blue", "orange", "red", "purple", "super-light-green",
           "dark-yellow", "light-blue", "dark-orange", "light-red", "dark-purple"]
COLOURED_PHASES = 64    # phasewatchd's default cap on the phases kept per target
PHASE_CHANGES = (f"sum by (instance, target) "
                 f"(increase(phasewatch_phase_changes_total{{{SELECT}}}[$__rate_interval])) > 0")


def _phase_colours() -> model.ValueMap:
    """One colour per phase id: a state timeline colours a value by its mapping."""
    return model.ValueMap(options={
        str(phase): model.ValueMappingResult(text=f"phase {phase}",
                                             color=PALETTE[phase % len(PALETTE)], index=phase)
        for phase in range(COLOURED_PHASES)})


def _current_phase() -> statetimeline.Panel:
    return (
        statetimeline.Panel().title("Current phase")
        .description("The phase id each target is in; a new colour is a phase change.")
        .datasource(DATASOURCE).unit("prefix:phase ").grid_pos(grid(0, 0, 24, 9))
        .color_scheme(dash.FieldColor().mode(model.FieldColorModeId.FIXED).fixed_color("text"))
        .mappings([_phase_colours()])
        .show_value(common_models.VisibilityMode.AUTO).merge_values(True).fill_opacity(80)
        .with_target(query(f"phasewatch_phase{{{SELECT}}}", "{{instance}} {{target}}"))
    )


def _interval_rate() -> timeseries.Panel:
    return (
        graph("Interval rate",
              "Classified intervals per second: how fast each target retires "
              "instructions, one interval per 100M by default.",
              "suffix: intervals/s", grid(0, 9, 12, 8)).min(0)
        .with_target(query(
            f"rate(phasewatch_intervals_total{{{SELECT}}}[$__rate_interval])",
            "{{instance}} {{target}}"))
    )


def _change_rate() -> timeseries.Panel:
    return (
        graph("Phase changes",
              "Intervals whose phase differs from the previous interval's, per second.",
              "suffix: changes/s", grid(12, 9, 12, 8)).min(0)
        .with_target(query(
            f"rate(phasewatch_phase_changes_total{{{SELECT}}}[$__rate_interval])",
            "{{instance}} {{target}}"))
    )


def _time_shares() -> bargauge.Panel:
    per_phase = (f"sum by (instance, target, phase, phase_name) "
                 f"(increase(phasewatch_phase_intervals_total{{{SELECT}}}[$__range]))")
    per_target = (f"sum by (instance, target) "
                  f"(increase(phasewatch_phase_intervals_total{{{SELECT}}}[$__range]))")
    return (
        bargauge.Panel().title("Time share per phase")
        .description("Share of each target's intervals, over the dashboard's time range, "
                     "that fell in each phase. Intervals have equal instruction counts.")
        .datasource(DATASOURCE).unit("percentunit").min(0).max(1).grid_pos(grid(0, 17, 12, 10))
        .orientation(common_models.VizOrientation.HORIZONTAL)
        .display_mode(common_models.BarGaugeDisplayMode.GRADIENT)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])
                        .values(False))
        .with_target(instant_query(f"{per_phase} / on (instance, target) group_left {per_target}",
                                   "{{target}} {{phase}} {{phase_name}}"))
    )


def _phases_kept() -> timeseries.Panel:
    return (
        graph("Phases kept and retired",
              "Phases each target keeps, and phases dropped by the per-target cap.",
              "short", grid(12, 17, 12, 10)).min(0)
        .with_target(query(f"phasewatch_phases{{{SELECT}}}", "{{instance}} {{target}} kept",
                           "A"))
        .with_target(query(
            f"increase(phasewatch_phases_retired_total{{{SELECT}}}[$__rate_interval])",
            "{{instance}} {{target}} retired", "B"))
    )


def _phase_change_annotation() -> dash.AnnotationQuery:
    return (
        dash.AnnotationQuery().name("Phase changes").datasource(DATASOURCE).enable(True)
        .icon_color("rgba(255, 152, 48, 0.6)").expr(PHASE_CHANGES)
    )


def build() -> model.Dashboard:
    return numbered(
        dash.Dashboard("phasewatch: phases").uid(UID).tags(["phasewatch"])
        .description("Program phases per target: current phase, changes, interval rate and "
                     "time shares.")
        .time("now-15m", "now").refresh("10s").timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR).readonly()
        .with_variable(host_variable()).with_variable(target_variable())
        .annotation(_phase_change_annotation())
        .link(dash.DashboardLink("phasewatch").type(model.DashboardLinkType.DASHBOARDS)
              .tags(["phasewatch"]).as_dropdown(False).include_vars(True).keep_time(True))
        .with_panel(_current_phase())
        .with_panel(_interval_rate())
        .with_panel(_change_rate())
        .with_panel(_time_shares())
        .with_panel(_phases_kept())
        .build()
    )
