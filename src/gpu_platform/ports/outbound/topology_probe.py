"""TopologyProbe: the host's PCIe/NUMA/fabric model (HostTopology).

`probe()` returns a HostTopology of this host (GPUs may be empty) or raises TopologyError
naming the source (a file and the offending element, a tool that failed). Two probes of an
unchanged host return equal topologies. Not required to be thread-safe.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.topology import HostTopology
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError

__all__ = ["TopologyError", "TopologyProbe"]


class TopologyError(DiscoveryError):
    """The topology could not be read: malformed or unsupported input, a failing tool."""


@runtime_checkable
class TopologyProbe(Protocol):
    name: str

    def probe(self) -> HostTopology: ...
