"""The shipped Grafana dashboard: every panel's query names only metrics the gateway exports."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

pytest.importorskip("prometheus_client")

from veracity.cli import main  # noqa: E402
from veracity.serve.metrics import GatewayMetrics  # noqa: E402

SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",),
            "histogram": ("_bucket", "_sum", "_count", "_created")}


def exported() -> set[str]:
    """Every series name the gateway's registry can expose."""
    names = set()
    for family in GatewayMetrics().registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def dashboard() -> dict:
    result = CliRunner().invoke(main, ["serve", "--print-dashboard"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_every_panel_queries_exported_metrics() -> None:
    names = exported()
    assert "veracity_gateway_decisions_total" in names and "veracity_gateway_gamma_bucket" in names
    panels = dashboard()["panels"]
    assert len(panels) >= 8 and len({p["id"] for p in panels}) == len(panels)
    used = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            found = set(re.findall(r"\bveracity_[a-z_]+", target["expr"]))
            assert found, f"{panel['title']}: a query naming no veracity metric"
            assert found <= names, f"{panel['title']}: not exported: {found - names}"
            used |= found
    # the decision telemetry the dashboard is for
    assert {"veracity_gateway_decisions_total", "veracity_gateway_observed_error",
            "veracity_gateway_error_bound", "veracity_gateway_unscored_total"} <= used


def test_the_check_catches_a_misnamed_metric() -> None:
    names = exported()
    assert not set(re.findall(r"\bveracity_[a-z_]+", "rate(veracity_gateway_decision_total[5m])")) <= names
