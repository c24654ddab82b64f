"""The Grafana dashboards: built from code, committed up to date, faithful to the
SDK's typed model, every panel with a unit, every query accepted by promtool."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from phasewatch.dashboards import rendered
from phasewatch.dashboards.__main__ import main as dashboards_main
from phasewatch.dashboards.common import DATASOURCE_NAME, DATASOURCE_UID
from phasewatch.dashboards.queries import queries, substitute

ROOT = Path(__file__).resolve().parent.parent
GRAFANA = ROOT / "grafana"
EMITTED = GRAFANA / "dashboards"
NAMES = sorted(rendered())
# Values that make every expression valid PromQL without a live server.
ANY = {"instance": ".*", "cpu": ".*", "target": ".*",
       "__rate_interval": "1m", "__interval": "15s", "__range": "15m"}


def emitted(name: str) -> dict:
    return json.loads((EMITTED / name).read_text())


def non_row_panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def lost_or_changed(original, back, path="") -> list[str]:
    """Paths present in `original` that `back` lacks or holds with another value.
    Keys `back` adds (the SDK's defaults) are not a loss."""
    if isinstance(original, dict) and isinstance(back, dict):
        return [problem for key, value in original.items()
                for problem in (lost_or_changed(value, back[key], f"{path}/{key}")
                                if key in back else [f"{path}/{key} lost"])]
    if isinstance(original, list) and isinstance(back, list):
        if len(original) != len(back):
            return [f"{path} has {len(back)} items instead of {len(original)}"]
        return [problem for i, (a, b) in enumerate(zip(original, back))
                for problem in lost_or_changed(a, b, f"{path}[{i}]")]
    return [] if original == back else [f"{path} changed: {original!r} -> {back!r}"]


def round_trip(dashboard: dict) -> dict:
    register_default_plugins()
    return json.loads(json.dumps(Dashboard.from_json(dashboard), cls=JSONEncoder))


@pytest.mark.parametrize("name", NAMES)
def test_committed_json_is_what_the_code_builds(name):
    assert (EMITTED / name).read_text() == rendered()[name], \
        f"grafana/dashboards/{name} is stale: run 'make dashboards' and commit it"


def test_check_mode_fails_on_a_stale_folder(tmp_path, capsys):
    assert dashboards_main([str(tmp_path)]) == 0
    assert dashboards_main([str(tmp_path), "--check"]) == 0
    stale = tmp_path / NAMES[0]
    stale.write_text(stale.read_text().replace("phasewatch_", "phasewatch_old_"))
    assert dashboards_main([str(tmp_path), "--check"]) == 1
    assert f"{stale} is stale" in capsys.readouterr().err


def test_an_unwritable_folder_is_one_line_and_status_2(tmp_path, capsys):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    assert dashboards_main([str(not_a_folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(not_a_folder) in err


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_through_the_typed_model_loses_no_key(name):
    dashboard = emitted(name)
    assert lost_or_changed(dashboard, round_trip(dashboard)) == []


def test_round_trip_catches_a_misspelled_field():
    dashboard = emitted(NAMES[0])
    broken = copy.deepcopy(dashboard)
    panel = non_row_panels(broken)[0]
    panel["fieldConfig"]["defaults"]["unti"] = "volt"
    panel["options"]["legnd"] = {}
    problems = lost_or_changed(broken, round_trip(broken))
    assert any("/fieldConfig/defaults/unti lost" in p for p in problems), problems
    assert any("/options/legnd lost" in p for p in problems), problems


@pytest.mark.parametrize("name", NAMES)
def test_every_panel_has_a_unit_and_the_provisioned_data_source(name):
    for panel in non_row_panels(emitted(name)):
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']} has no unit"
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}, panel["title"]
        if panel["type"] == "heatmap":
            assert panel["options"]["yAxis"].get("unit"), f"{panel['title']}: no y-axis unit"
            assert panel["options"]["cellValues"].get("unit"), f"{panel['title']}: no cell unit"


@pytest.mark.parametrize("name", NAMES)
def test_panel_ids_are_unique_and_panels_do_not_overlap(name):
    panels = emitted(name)["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for panel in panels:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_variables_for_host_cpu_and_target():
    variables = {name: [v["name"] for v in emitted(name)["templating"]["list"]] for name in NAMES}
    assert variables == {"phasewatch-host.json": ["instance", "cpu"],
                         "phasewatch-phases.json": ["instance", "target"]}
    for name in NAMES:
        for query in queries(emitted(name)):
            if "/ variable instance" not in query.where:
                assert '$instance' in query.expr, f"{query.where} ignores the host variable"


def test_phase_changes_are_annotations():
    annotations = emitted("phasewatch-phases.json")["annotations"]["list"]
    assert [a["name"] for a in annotations] == ["Phase changes"]
    assert "phasewatch_phase_changes_total" in annotations[0]["expr"]


def test_provisioning_names_the_data_source_and_the_dashboards_folder():
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/phasewatch.yaml").read_text())
    [source] = sources["datasources"]
    assert (source["uid"], source["name"], source["type"]) == \
        (DATASOURCE_UID, DATASOURCE_NAME, "prometheus")
    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/phasewatch.yaml").read_text())
    [provider] = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")


def promtool_check_rules(tmp_path: Path, expressions: list[str]) -> subprocess.CompletedProcess:
    """Each expression as a recording rule, checked by Prometheus's own parser."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: apt-get install prometheus")
    rules = {"groups": [{"name": "phasewatch-dashboards", "rules": [
        {"record": f"phasewatch_dashboard:query{i}", "expr": expr}
        for i, expr in enumerate(expressions)]}]}
    path = tmp_path / "dashboard-queries.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return subprocess.run([promtool, "check", "rules", str(path)],
                          capture_output=True, text=True)


def every_expr(node) -> list[str]:
    """Every "expr" anywhere in a dashboard's JSON."""
    if isinstance(node, dict):
        return [e for key, value in node.items()
                for e in ([value] if key == "expr" else every_expr(value))]
    if isinstance(node, list):
        return [e for item in node for e in every_expr(item)]
    return []


@pytest.mark.parametrize("name", NAMES)
def test_query_finder_finds_every_expression(name):
    dashboard = emitted(name)
    found = [q.expr for q in queries(dashboard) if "/ variable " not in q.where]
    assert sorted(found) == sorted(every_expr(dashboard))


def test_every_query_passes_promtool(tmp_path):
    expressions = [substitute(q.expr, ANY) for name in NAMES for q in queries(emitted(name))]
    assert len(expressions) >= 20
    result = promtool_check_rules(tmp_path, expressions)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout


def test_promtool_rejects_a_broken_query(tmp_path):
    result = promtool_check_rules(tmp_path, ["sum by (le) (rate(phasewatch_samples_total[1m])"])
    assert result.returncode != 0
