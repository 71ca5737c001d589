"""NVIDIA's stock dcgm-exporter Grafana dashboard (vendored unchanged under deploy/grafana/)
against a real Prometheus scraping a real `gpu-platform serve`: every metric name any of its
queries uses has series. The simulated node is what CI has; docs/observability.md says which
series real NVML nodes cannot give (the DCGM_FI_PROF_* profiling ratios)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpu_platform.testing.ports import wait_for_listening
from gpu_platform.testing.system import require_tool
from tests.integration.conftest import Server, wait_for
from tests.system.test_prometheus_scrape import query

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "dcgm-exporter-dashboard.json"
NAME = re.compile(r"\b(DCGM_FI_[A-Z0-9_]+)\b")


def queries(node: Any) -> Iterator[str]:
    """Every PromQL text of a Grafana dashboard: panel targets and template variables."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query", "definition") and isinstance(value, str):
                yield value
            else:
                yield from queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)


def dashboard_metric_names() -> set[str]:
    return {m for q in queries(json.loads(DASHBOARD.read_text())) for m in NAME.findall(q)}


def test_the_vendored_dashboard_queries_the_series_we_claim() -> None:
    assert dashboard_metric_names() >= {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    }


def test_every_metric_of_nvidia_s_stock_dashboard_has_series_in_prometheus(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    prometheus = require_tool("prometheus", "prometheus")
    server = server_factory()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: gpu-platform\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{server.port}']\n"
    )
    log = tmp_path / "prometheus.log"
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         "--web.listen-address=127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip
    try:
        port = wait_for_listening(proc)
        assert wait_for(lambda: len(query(port, "DCGM_FI_DEV_GPU_TEMP")) == 8, 60), log.read_text()[
            -2000:
        ]
        missing = sorted(n for n in dashboard_metric_names() if len(query(port, n)) != 8)
        assert missing == [], f"the stock dashboard queries series we do not export: {missing}"
        # counters keep dcgm-exporter's names: no `_total` added
        assert len(query(port, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")) == 8
        assert query(port, '{__name__=~"DCGM_.*_total"}') == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)
