"""An agent's /metrics endpoint serves dcgm-exporter's exact names (no `_total` on counters)."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry

from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery
from gpu_platform.infrastructure.agent_metrics import serve_agent_metrics
from gpu_platform.infrastructure.dcgm_metrics import DcgmCollector


def test_an_agent_serves_dcgm_counters_under_dcgm_exporter_s_names() -> None:
    sim = ProfileGpuDiscovery("dgx-a100", "node-1")
    registry = CollectorRegistry()
    registry.register(DcgmCollector(sim.snapshot, dict, hostname="node-1"))
    port = serve_agent_metrics(registry, "127.0.0.1", 0)
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert text.count("\nDCGM_FI_DEV_PCIE_REPLAY_COUNTER{") == 8
    assert "_total" not in text
    assert httpx.get(f"http://127.0.0.1:{port}/nope", timeout=10).status_code == 404


def test_with_a_token_an_agent_s_metrics_need_it_and_a_wrong_one_is_401() -> None:
    registry = CollectorRegistry()
    port = serve_agent_metrics(registry, "127.0.0.1", 0, token="s3cret")
    url = f"http://127.0.0.1:{port}/metrics"
    assert httpx.get(url, timeout=10).status_code == 401
    wrong = httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401 and "Bearer" in wrong.headers["www-authenticate"]
    right = httpx.get(url, headers={"Authorization": "Bearer s3cret"}, timeout=10)
    assert right.status_code == 200
