"""A shared GPU in /metrics: how many jobs share it and what they pin, and its dcgm series
once per sharer with that sharer's `hpc_job` label (server and agent label sources)."""

from __future__ import annotations

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.dcgm_metrics import (
    DcgmCollector,
    GpuLabels,
    exposition,
    service_labels,
)
from gpu_platform.infrastructure.metrics import Metrics
from tests.unit.application.test_gpu_sharing import Rig

GIB = 1 << 30


def test_a_shared_gpu_has_its_shares_in_metrics_and_a_dcgm_series_per_sharer() -> None:
    rig = Rig(Inventory((default_node(),), source="sim", simulated=True))
    jobs = [
        rig.plane.submit(
            JobSpec(("fake-forever",), gpus=1, gpu_milli=250, gpu_memory_bytes=10 * GIB)
        ).id
        for _ in range(4)
    ]
    rig.plane.schedule_once()
    node, (gpu,) = rig.gpu_of(jobs[0])
    metrics = Metrics()
    metrics.watch(lambda: rig.plane)
    text = metrics.render()[0].decode()
    assert f'gpu_platform_gpu_shares{{gpu="{gpu}",node="{node}"}} 4.0' in text
    pinned = f'gpu_platform_gpu_pinned_memory_bytes{{gpu="{gpu}",node="{node}"}} '
    (line,) = [x for x in text.splitlines() if x.startswith(pinned)]
    assert float(line.removeprefix(pinned)) == 40 * GIB

    sim = ProfileGpuDiscovery("dgx-a100", node)
    dcgm = exposition(DcgmCollector(sim.snapshot, service_labels(lambda: rig.plane))).decode()
    temps = [
        line
        for line in dcgm.splitlines()
        if line.startswith("DCGM_FI_DEV_GPU_TEMP{") and f'gpu="{gpu}"' in line
    ]
    assert sorted(t.split('hpc_job="')[1].split('"')[0] for t in temps) == sorted(jobs)


def test_an_agents_label_source_writes_one_series_per_sharer() -> None:
    node = default_node()
    sim = ProfileGpuDiscovery("dgx-a100", node.name)
    sharers = (("j-1", "a"), ("j-2", "b"))
    labels = {(node.name, 3): GpuLabels("m", "p", "j-1", "a", sharers)}
    text = exposition(DcgmCollector(sim.snapshot, lambda: labels)).decode()
    temps = [
        x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_GPU_TEMP{") and 'gpu="3"' in x
    ]
    assert len(temps) == 2
    assert any('hpc_job="j-2"' in t and 'tenant="b"' in t for t in temps)
