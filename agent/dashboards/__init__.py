"""Grafana dashboards for phasewatchd's metrics, built with grafana-foundation-sdk.

`python -m phasewatch.dashboards DIR` writes one JSON file per dashboard into DIR;
`--check` compares instead of writing, and fails when a committed file is stale.
Imports nothing of phasewatch: the dashboards name the metrics as Prometheus sees them.
"""

import json
from collections.abc import Callable

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from . import host, phases

DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    host.UID: host.build,
    phases.UID: phases.build,
}


def render(dashboard: Dashboard) -> str:
    """The dashboard as Grafana's JSON model, in a stable textual form."""
    return json.dumps(dashboard, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def rendered() -> dict[str, str]:
    """File name to JSON text, for every dashboard."""
    return {f"{uid}.json": render(build()) for uid, build in DASHBOARDS.items()}
