"""The Grafana dashboard's PromQL, as plain queries a test can run against Prometheus.

The dashboard lives in the source tree (`deploy/grafana/dashboards/`), not in
the installed package: pass `path` when running elsewhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["DASHBOARD_PATH", "dashboard_queries", "metric_names"]

DASHBOARD_PATH: Final = (
    Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards" / "streamremat.json"
)

# What Grafana would put in place of its variables on a default view.
DEFAULT_VARIABLES: Final[Mapping[str, str]] = {
    "app": ".*",
    "operator": ".*",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
}

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_METRIC = re.compile(r"\bstreamremat_[A-Za-z0-9_:]*")


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # collapsed rows nest their panels


def _substitute(expr: str, variables: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise ValueError(f"dashboard query uses ${name}; pass a value for it in `variables`")
        return variables[name]

    return _VARIABLE.sub(value, expr)


def dashboard_queries(
    path: Path | None = None, variables: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """`(panel title, PromQL)` for every panel target, Grafana variables substituted.

    `variables` override `DEFAULT_VARIABLES` (e.g. `{"app": "clicks"}`); a panel
    with several targets yields several pairs with the same title.
    """
    values = {**DEFAULT_VARIABLES, **(variables or {})}
    dashboard = json.loads((path or DASHBOARD_PATH).read_text())
    return [
        (panel["title"], _substitute(target["expr"], values))
        for panel in _panels(dashboard["panels"])
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


def metric_names(expr: str) -> set[str]:
    """The `streamremat_*` metric names an expression reads (histogram suffixes kept)."""
    return set(_METRIC.findall(expr))
