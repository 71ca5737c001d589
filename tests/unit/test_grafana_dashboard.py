"""Every query of the shipped Grafana dashboard names series and labels that /metrics exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.unit.adapters.test_observability import rig, wait_running

__all__ = ["rig"]

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy/grafana/gpu-platform-scheduler.json"
FUNCTIONS = {"sum", "by", "rate", "avg", "max", "min", "count"}


def test_every_panel_queries_series_we_export(rig) -> None:  # type: ignore[no-untyped-def]
    client, runner, clock = rig
    done = client.post("/v1/jobs", json={"command": ["fake-exit", "0"], "gpus": 1}).json()
    job = client.post("/v1/jobs", json={"command": ["fake-forever"], "gpus": 1}).json()
    wait_running(client, job["id"])
    clock.advance(60)
    runner.deliver()
    assert client.get(f"/v1/jobs/{done['id']}").json()["state"] == "COMPLETED"
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            names = {
                n for n in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{(\[]", expr)
            } - FUNCTIONS
            assert names, expr
            for name in names:
                assert name in exported, f"{panel['title']}: {name} is not exported"
                used = set(re.findall(rf"{name}\{{([^}}]*)\}}", expr))
                for selector in used:
                    for label in re.findall(r"(\w+)\s*[!=]~?", selector):
                        assert label == "instance" or label in exported[name], (name, label)
