"""What both dashboards share: the data source, the variables and the query builders.

The data source is fixed (uid and name below) so that the provisioned data source
and the dashboards agree without an import-time prompt.
"""

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat, QueryEditorMode

DATASOURCE_UID = "phasewatch-prometheus"
DATASOURCE_NAME = "phasewatch Prometheus"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)

# Every panel selects the host with this matcher; the CPU and target variables add theirs.
HOST = 'instance=~"$instance"'
CPU = 'cpu=~"$cpu"'
TARGET = 'target=~"$target"'


def _label_variable(name: str, label: str, query: str,
                    sort: model.VariableSort = model.VariableSort.ALPHABETICAL_ASC
                    ) -> dash.QueryVariable:
    """A multi-value variable over one label's values, "All" matching any."""
    return (
        dash.QueryVariable(name).id(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(sort)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def host_variable() -> dash.QueryVariable:
    return _label_variable("instance", "host", "label_values(phasewatch_build_info, instance)")


def cpu_variable() -> dash.QueryVariable:
    return _label_variable(
        "cpu", "CPU", f"label_values(phasewatch_cpu_frequency_hertz{{{HOST}}}, cpu)",
        model.VariableSort.NUMERICAL_ASC)


def target_variable() -> dash.QueryVariable:
    return _label_variable(
        "target", "target", f"label_values(phasewatch_phase{{{HOST}}}, target)")


def query(expr: str, legend: str, ref_id: str = "A") -> prometheus.Dataquery:
    """A range query drawn over time."""
    return (prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref_id)
            .range().editor_mode(QueryEditorMode.CODE))


def instant_query(expr: str, legend: str, ref_id: str = "A") -> prometheus.Dataquery:
    """One value per series at the end of the time range."""
    return (prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref_id)
            .instant().editor_mode(QueryEditorMode.CODE))


def heatmap_query(expr: str) -> prometheus.Dataquery:
    """Histogram buckets, one row per upper bound `le`."""
    return (prometheus.Dataquery().expr(expr).legend_format("{{le}}").ref_id("A")
            .range().format(PromQueryFormat.HEATMAP).editor_mode(QueryEditorMode.CODE))


def grid(x: int, y: int, w: int, h: int) -> model.GridPos:
    return model.GridPos(x=x, y=y, w=w, h=h)


def graph(title: str, description: str, unit: str, pos: model.GridPos) -> timeseries.Panel:
    """A time series panel with the settings every graph here shares."""
    return (
        timeseries.Panel().title(title).description(description).datasource(DATASOURCE)
        .unit(unit).grid_pos(pos)
        .legend(common_builders.VizLegendOptions().show_legend(True)
                .display_mode(common_models.LegendDisplayMode.TABLE)
                .placement(common_models.LegendPlacement.BOTTOM)
                .calcs(["mean", "max", "lastNotNull"]))
        .tooltip(common_builders.VizTooltipOptions().mode(common_models.TooltipDisplayMode.MULTI)
                 .sort(common_models.SortOrder.DESCENDING))
    )


def numbered(dashboard: model.Dashboard) -> model.Dashboard:
    """Give every panel and row its own id, in layout order, as Grafana expects."""
    for number, panel in enumerate(dashboard.panels or [], start=1):
        panel.id_val = number
    return dashboard
