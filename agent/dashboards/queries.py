"""The PromQL a dashboard runs, found in its JSON, and Grafana's variables filled in.

Used to check every expression against promtool and a real Prometheus, and to list
the metric names the dashboards depend on.
"""

import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple

METRIC_NAME = re.compile(r"\bphasewatch_[a-z0-9_]+\b")
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")
VARIABLE = re.compile(r"\$(\w+)")


class Query(NamedTuple):
    where: str   # the panel, annotation or variable it comes from
    expr: str    # PromQL, with Grafana's variables still in it


def queries(dashboard: Mapping) -> Iterator[Query]:
    """Every PromQL expression of a dashboard's JSON: panel targets (rows included),
    annotations, and the selectors of label_values() variables."""
    title = dashboard["title"]
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets") or []:
            yield Query(f"{title} / {panel['title']} / {target['refId']}", target["expr"])
    for annotation in (dashboard.get("annotations") or {}).get("list") or []:
        if annotation.get("expr"):
            yield Query(f"{title} / annotation {annotation['name']}", annotation["expr"])
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") == "query":
            match = LABEL_VALUES.match(variable["query"])
            if match is None:
                raise ValueError(f"{title}: variable {variable['name']} is not label_values()")
            yield Query(f"{title} / variable {variable['name']}", match["selector"])


def _panels(panels: list) -> Iterator[Mapping]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """The expression with each $variable replaced; a variable not in `values` is an error."""
    def value(match: re.Match) -> str:
        if match[1] not in values:
            raise KeyError(f"no value for ${match[1]} in {expr!r}")
        return values[match[1]]
    return VARIABLE.sub(value, expr)


def metric_names(expr: str) -> set[str]:
    return set(METRIC_NAME.findall(expr))
