"""dcgm-exporter-compatible GPU series and GPU-hour accounting, scraped and parsed as
Prometheus would, through the real container with fakes for time and processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    SequentialJobIds,
)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[TestClient, FakeJobRunner, ManualClock]]:
    container = Container(
        settings=Settings(
            server_id=0,  # the embedded core: these test the APIs over in-process fakes
            data_dir=tmp_path,
            schedule_interval_seconds=0.05,
            grpc_port=-1,
            health_source="none",
            scheduler_preemption=False,  # the scenarios move jobs by faults only
        )
    )
    runner, clock = FakeJobRunner(), ManualClock(1_000_000.0)
    container.adapters.discovery.override(providers.Object(ProfileGpuDiscovery("dgx-a100")))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(runner))
    container.adapters.clock.override(providers.Object(clock))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    try:
        with TestClient(container.rest_app()) as client:
            yield client, runner, clock
    finally:
        container.shutdown_resources()


def wait_running(client: TestClient, job_id: str) -> None:
    for _ in range(500):
        if client.get(f"/v1/jobs/{job_id}").json()["state"] == "RUNNING":
            return
        time.sleep(0.01)
    raise AssertionError("job never ran")


def scrape(client: TestClient) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_gpu_series_carry_dcgm_names_labels_units_and_the_job_holding_the_gpu(rig) -> None:  # type: ignore[no-untyped-def]
    client, _, _ = rig
    job = client.post(
        "/v1/jobs", json={"command": ["fake-forever"], "gpus": 2, "tenant": "team-a"}
    ).json()
    wait_running(client, job["id"])
    series = scrape(client)
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                 "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"):  # fmt: skip
        assert len(series[name]) == 8, name
    temps = {s[0]["gpu"]: s for s in series["DCGM_FI_DEV_GPU_TEMP"]}
    labels, value = temps["0"]
    assert set(labels) == {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "hpc_job",
        "tenant",
    }
    assert labels["device"] == "nvidia0" and labels["UUID"].startswith("GPU-")
    assert labels["modelName"] and labels["Hostname"] == "node-0"
    assert (labels["hpc_job"], labels["tenant"]) == (job["id"], "team-a")
    assert temps["5"][0]["hpc_job"] == "" and value == 30.0
    free = {s[0]["gpu"]: s[1] for s in series["DCGM_FI_DEV_FB_FREE"]}
    assert free["0"] == 81920  # MiB of an idle 80 GiB A100
    assert {s[1] for s in series["DCGM_FI_DEV_POWER_USAGE"]} == {60.0}  # watts


def test_dcgm_series_keep_dcgm_exporter_s_exact_names_and_types(rig) -> None:  # type: ignore[no-untyped-def]
    """dcgm-exporter's default counters file: counters have no `_total` suffix (issue 19)."""
    client, _, _ = rig
    text = client.get("/metrics").text
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE DCGM_"))
    assert types == {
        "DCGM_FI_DEV_GPU_UTIL": "gauge",
        "DCGM_FI_DEV_FB_USED": "gauge",
        "DCGM_FI_DEV_FB_FREE": "gauge",
        "DCGM_FI_DEV_GPU_TEMP": "gauge",
        "DCGM_FI_DEV_POWER_USAGE": "gauge",
        "DCGM_FI_DEV_SM_CLOCK": "gauge",
        "DCGM_FI_DEV_MEM_CLOCK": "gauge",
        "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
        "DCGM_FI_DEV_XID_ERRORS": "gauge",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gauge",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gauge",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "counter",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
    }
    samples = {line.split("{")[0] for line in text.splitlines() if line.startswith("DCGM_")}
    remapping = {n for n in types if "REMAP" in n}  # only where NVML reports row remapping
    assert samples == set(types) - remapping
    assert "_total" not in "".join(samples)


def test_usage_counts_gpu_hours_per_tenant_and_job(rig) -> None:  # type: ignore[no-untyped-def]
    client, runner, clock = rig
    a = client.post(
        "/v1/jobs", json={"command": ["fake-forever"], "gpus": 2, "tenant": "team-a"}
    ).json()
    b = client.post(
        "/v1/jobs", json={"command": ["fake-forever"], "gpus": 4, "tenant": "team-b"}
    ).json()
    wait_running(client, a["id"])
    wait_running(client, b["id"])
    clock.advance(1800)  # half an hour
    runner.finish(a["id"], 0)
    runner.deliver()
    clock.advance(1800)
    report = client.get("/v1/usage").json()
    assert report["gpu_hours_by_tenant"] == {"team-a": 1.0, "team-b": 4.0}
    assert report["gpu_hours"] == 5.0
    only_b = client.get(
        "/v1/usage", params={"tenant": "team-b", "since": 1_000_000.0 + 1800}
    ).json()
    assert only_b["gpu_hours"] == 2.0 and [j["job_id"] for j in only_b["jobs"]] == [b["id"]]
    series = scrape(client)["gpu_platform_tenant_gpu_hours"]
    assert {s[0]["tenant"]: s[1] for s in series} == {"team-a": 1.0, "team-b": 4.0}
    bad = client.get("/v1/usage", params={"since": 2e9, "until": 1e9})
    assert bad.status_code == 422
