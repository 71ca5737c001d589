"""GPU metrics under dcgm-exporter's names, types, units and labels, plus job and tenant labels.

The names and types are those of dcgm-exporter's default counters file; its counters carry no
`_total` suffix, so `exposition()` writes ours without the one prometheus-client adds. The
series carry the labels NVIDIA's stock dashboard filters on (`gpu`, `UUID`, `pci_bus_id`,
`device`, `modelName`, `Hostname`), and GPUs held by a job also carry `hpc_job`
(dcgm-exporter's own HPC-mode label) and `tenant`; a GPU shared by several jobs (shares of one
GPU) has one series per sharer, each with that sharer's `hpc_job` and `tenant`. Values come
from the discovery adapter's telemetry snapshot, read at scrape time; a reading the source
does not give is omitted.

| series | unit | from |
|---|---|---|
| DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_MEM_COPY_UTIL | % | utilization rates |
| DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE | MiB | memory info |
| DCGM_FI_DEV_GPU_TEMP | °C | temperature |
| DCGM_FI_DEV_POWER_USAGE | W | power (mW / 1000) |
| DCGM_FI_DEV_SM_CLOCK, DCGM_FI_DEV_MEM_CLOCK | MHz | clock info |
| DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION | mJ (counter) | total energy consumption |
| DCGM_FI_DEV_PCIE_REPLAY_COUNTER | count (counter) | PCIe replay counter |
| DCGM_FI_DEV_XID_ERRORS | last XID | simulated nodes only (0); NVML XIDs are fault events |
| DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL | count (counter) | volatile ECC |
| DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS | count (counter) | row remapping |
| DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS | count (counter) | row remapping |
| DCGM_FI_DEV_ROW_REMAP_FAILURE | 0/1 | row remapping |
| DCGM_FI_PROF_GR_ENGINE_ACTIVE, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE | ratio | simulated nodes only |

NVML has no profiling counters: on real GPUs the DCGM_FI_PROF_* series are absent; simulated
GPUs derive them from their simulated utilization.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.model.telemetry import GpuReading, TelemetrySnapshot
from gpu_platform.ports.inbound.job_service import JobService

__all__ = [
    "DCGM_LABELS",
    "DcgmCollector",
    "GpuLabels",
    "LabelSource",
    "exposition",
    "service_labels",
]

log = structlog.get_logger(__name__)

DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "hpc_job", "tenant")
MIB = 1 << 20

# name, help, kind, value(reading) -> float | None
_SERIES: tuple[tuple[str, str, str, Callable[[GpuReading], float | None]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge", lambda r: r.utilization_pct),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        "gauge",
        lambda r: None if r.memory_used_bytes is None else r.memory_used_bytes // MIB,
    ),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        "gauge",
        lambda r: (
            None
            if r.memory_used_bytes is None or r.memory_total_bytes is None
            else (r.memory_total_bytes - r.memory_used_bytes) // MIB
        ),
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge", lambda r: r.temperature_c),
    (
        "DCGM_FI_DEV_POWER_USAGE",
        "Power draw (in W).",
        "gauge",
        lambda r: None if r.power_mw is None else r.power_mw / 1000,
    ),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "gauge", lambda r: r.sm_clock_mhz),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        "gauge",
        lambda r: r.mem_clock_mhz,
    ),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        "gauge",
        lambda r: r.memory_util_pct,
    ),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        "counter",
        lambda r: r.energy_mj,
    ),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries.",
        "counter",
        lambda r: r.pcie_replays,
    ),
    (
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
        "gauge",
        lambda r: r.last_xid,
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        "gauge",
        lambda r: r.gr_engine_active,
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "gauge",
        lambda r: r.tensor_active,
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        "counter",
        lambda r: r.ecc_corrected,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        "counter",
        lambda r: r.ecc_uncorrected,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors",
        "counter",
        lambda r: None if r.remapped_rows is None else r.remapped_rows.correctable,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors",
        "counter",
        lambda r: None if r.remapped_rows is None else r.remapped_rows.uncorrectable,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed",
        "gauge",
        lambda r: None if r.remapped_rows is None else float(r.remapped_rows.failed),
    ),
)


@dataclass(frozen=True, slots=True)
class GpuLabels:
    """What the scheduler knows of a GPU for its labels: model, PCI bus id, holder, tenant."""

    model: str = ""
    pci_bus_id: str = ""
    job_id: str = ""
    tenant: str = ""
    sharers: tuple[tuple[str, str], ...] = ()  # (job id, tenant) of each job sharing the GPU


LabelSource = Callable[[], Mapping[tuple[str, int], GpuLabels]]


def service_labels(service: Callable[[], JobService]) -> LabelSource:
    """Labels from a control plane: every GPU it knows, with the job holding it."""

    def labels() -> dict[tuple[str, int], GpuLabels]:
        plane = service()
        out = {}
        for info in plane.gpus():
            tenant = _tenant(plane, info.job_id)
            sharers = tuple((s.job_id, _tenant(plane, s.job_id)) for s in info.shares)
            out[(info.gpu.node, info.gpu.index)] = GpuLabels(
                info.gpu.model, info.gpu.pci_bus_id, info.job_id or "", tenant, sharers
            )
        return out

    return labels


def _tenant(plane: JobService, job_id: str | None) -> str:
    if job_id is None:
        return ""
    try:
        return plane.get(job_id).spec.tenant
    except NotFound:
        return ""


class DcgmCollector(Collector):
    """Collects dcgm-exporter-named series from `telemetry()` (None = no telemetry source),
    labelled by `labels()` (the server's control plane, or an agent's running tasks)."""

    def __init__(
        self,
        telemetry: Callable[[], TelemetrySnapshot | None],
        labels: LabelSource,
        hostname: str | None = None,
    ) -> None:
        self._telemetry = telemetry
        self._labels_of = labels
        self._hostname = hostname or socket.gethostname()

    def collect(self) -> Iterator[Any]:
        try:
            snapshot = self._telemetry()
        except Exception as exc:  # a scrape must never take the server down
            log.warning("telemetry snapshot failed", error=str(exc))
            return
        if snapshot is None:
            return
        known = self._labels_of()
        families = {
            name: (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
                name, help_text, labels=DCGM_LABELS
            )
            for name, help_text, kind, _ in _SERIES
        }
        for reading in snapshot.gpus:
            info = known.get((snapshot.node, reading.index), GpuLabels())
            base = [
                str(reading.index),
                reading.uuid,
                info.pci_bus_id,
                f"nvidia{reading.index}",
                info.model,
                snapshot.node or self._hostname,
            ]
            holders = info.sharers or ((info.job_id, info.tenant),)
            for name, _, _, value_of in _SERIES:
                value = value_of(reading)
                if value is not None:
                    for job_id, tenant in holders:  # a shared GPU: one series per sharer
                        families[name].add_metric([*base, job_id, tenant], float(value))
        yield from families.values()


# prometheus-client writes every counter as NAME_total; dcgm-exporter writes its counters
# (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, ..._REMAPPED_ROWS, ...) under their own names.
_DCGM_TOTAL = re.compile(rb"(?m)^(# (?:HELP|TYPE) )?(DCGM_FI_[A-Z0-9_]+?)_total(?=[ {])")


def exposition(registry: Collector) -> bytes:
    """The Prometheus text format of `registry`, DCGM counters under dcgm-exporter's names."""
    return _DCGM_TOTAL.sub(rb"\1\2", generate_latest(registry))
