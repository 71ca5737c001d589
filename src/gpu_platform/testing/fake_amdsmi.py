"""A fake `amdsmi` module driven by a HostTopology (its AMD GPUs), for the amdsmi adapter.

Names and return shapes follow amdsmi 7.0.2's `amdsmi_interface.py`: dict-returning getters,
`AmdSmiLibraryException(err_code)` with `get_error_code()`, "N/A" strings for fields a GPU
does not report, VRAM in MB, power in W. XGMI links in the topology become
`amdsmi_topo_get_link_type` → {"hops": 1, "type": AMDSMI_LINK_TYPE_XGMI}.

`not_supported`: function names, or (name, GPU index) pairs, raising status 2
(AMDSMI_STATUS_NOT_SUPPORTED). `driver_loaded=False` makes amdsmi_init raise status 34.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpu_platform.domain.model.topology import FabricKind, HostTopology, normalize_bus_id

__all__ = ["AmdSmiLibraryException", "FakeAmdSmi"]


class AmdSmiLibraryException(Exception):
    def __init__(self, err_code: int) -> None:
        super().__init__(f"Error code:\n\t{err_code}")
        self.err_code = abs(err_code)

    def get_error_code(self) -> int:
        return self.err_code


class FakeAmdSmi:
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiInitFlags = SimpleNamespace(INIT_AMD_GPUS=2)
    AmdSmiLinkType = SimpleNamespace(
        AMDSMI_LINK_TYPE_INTERNAL=0, AMDSMI_LINK_TYPE_PCIE=1, AMDSMI_LINK_TYPE_XGMI=2
    )
    AmdSmiTemperatureType = SimpleNamespace(EDGE=0, HOTSPOT=1)
    AmdSmiTemperatureMetric = SimpleNamespace(CURRENT=0)

    def __init__(
        self,
        topology: HostTopology,
        *,
        driver_loaded: bool = True,
        not_supported: set[Any] | None = None,
        power_na: bool = False,
    ) -> None:
        self.topology = topology
        self.gpus = sorted(
            (g for g in topology.gpus if g.vendor.value == "amd"), key=lambda g: g.index
        )
        self.driver_loaded = driver_loaded
        self.not_supported = set(not_supported or ())
        self.power_na = power_na
        self.initialised = 0
        self.activity = [0] * len(self.gpus)
        self.temperature = [35] * len(self.gpus)  # °C, HOTSPOT; tests change them
        self.ecc = [(0, 0)] * len(self.gpus)  # (correctable, uncorrectable) totals
        xgmi = [
            frozenset((normalize_bus_id(link.a), normalize_bus_id(link.b)))
            for link in topology.links
            if link.kind is FabricKind.XGMI
        ]
        self._xgmi = set(xgmi)

    def _enter(self, name: str, h: int | None = None) -> None:
        if not self.initialised:
            raise AmdSmiLibraryException(32)  # AMDSMI_STATUS_NOT_INIT
        if name in self.not_supported or (name, h) in self.not_supported:
            raise AmdSmiLibraryException(2)

    def amdsmi_init(self, flag: int = 2) -> None:
        if not self.driver_loaded:
            raise AmdSmiLibraryException(34)  # AMDSMI_STATUS_DRIVER_NOT_LOADED
        self.initialised += 1

    def amdsmi_shut_down(self) -> None:
        self._enter("amdsmi_shut_down")
        self.initialised -= 1

    def amdsmi_get_processor_handles(self) -> list[int]:
        self._enter("amdsmi_get_processor_handles")
        return list(range(len(self.gpus)))

    def amdsmi_get_gpu_device_bdf(self, h: int) -> str:
        self._enter("amdsmi_get_gpu_device_bdf", h)
        return self.gpus[h].pci_bus_id

    def amdsmi_get_gpu_device_uuid(self, h: int) -> str:
        self._enter("amdsmi_get_gpu_device_uuid", h)
        return self.gpus[h].uuid or f"fake-amd-{self.topology.node}-{h}"

    def amdsmi_get_gpu_asic_info(self, h: int) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_asic_info", h)
        return {
            "market_name": self.gpus[h].model,
            "vendor_id": "0x1002",
            "device_id": "0x740f",
            "asic_serial": f"{h:016x}",
            "num_compute_units": 104,
        }

    def amdsmi_get_gpu_vram_usage(self, h: int) -> dict[str, int]:
        self._enter("amdsmi_get_gpu_vram_usage", h)
        return {"vram_total": self.gpus[h].memory_bytes >> 20, "vram_used": 0}

    def amdsmi_topo_get_numa_node_number(self, h: int) -> int:
        self._enter("amdsmi_topo_get_numa_node_number", h)
        return self.gpus[h].numa_node

    def amdsmi_topo_get_link_type(self, h1: int, h2: int) -> dict[str, int]:
        self._enter("amdsmi_topo_get_link_type", h1)
        pair = frozenset((self.gpus[h1].pci_bus_id, self.gpus[h2].pci_bus_id))
        if pair in self._xgmi:
            return {"hops": 1, "type": self.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI}
        return {"hops": 2, "type": self.AmdSmiLinkType.AMDSMI_LINK_TYPE_PCIE}

    def amdsmi_get_minmax_bandwidth_between_processors(self, h1: int, h2: int) -> dict[str, int]:
        self._enter("amdsmi_get_minmax_bandwidth_between_processors", h1)
        return {"min_bandwidth": 50_000, "max_bandwidth": 100_000}

    def amdsmi_get_gpu_activity(self, h: int) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_activity", h)
        return {"gfx_activity": self.activity[h], "umc_activity": 0, "mm_activity": "N/A"}

    def amdsmi_get_temp_metric(self, h: int, sensor: int, metric: int) -> int:
        self._enter("amdsmi_get_temp_metric", h)
        return self.temperature[h]

    def amdsmi_get_power_info(self, h: int) -> dict[str, Any]:
        self._enter("amdsmi_get_power_info", h)
        return {"socket_power": "N/A" if self.power_na else 90, "power_limit": 300}

    def amdsmi_get_gpu_total_ecc_count(self, h: int) -> dict[str, int]:
        self._enter("amdsmi_get_gpu_total_ecc_count", h)
        corrected, uncorrected = self.ecc[h]
        return {
            "correctable_count": corrected,
            "uncorrectable_count": uncorrected,
            "deferred_count": 0,
        }
