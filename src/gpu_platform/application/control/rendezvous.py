"""Where a gang's tasks meet: torchrun's MASTER_ADDR and MASTER_PORT for one attempt.

Every task of a gang must be given the same address and port before any of them starts, and
the tasks run on different nodes, each started by its own agent. So the port cannot be picked
by the agents: the leader names it when it builds the launch specs.

The port is `base + the first GPU index of rank 0` (base: `gang_port_base`, 29500 by
default, torch's own default). GPUs are never shared by a gang, so two attempts that are live
at once with rank 0 on the same node have different ports; the choice needs no lease table
and is the same on any leader, before and after a failover. Where that does not hold, the
port is `base + 1024 + a hash`: a rank 0 without a GPU (hash of the job), or a node whose
address is loopback (agents sharing one host: hash of the node and GPU). Those can collide;
the rank-0 runner then fails the launch naming the port, rather than hang the gang. A node
without an `address` label (one server running every task itself) keeps port 0: that runner
picks one free port for the whole attempt.
"""

from __future__ import annotations

import zlib

from gpu_platform.domain.model.job import TaskSlot
from gpu_platform.domain.model.node import Node

__all__ = ["DEFAULT_GANG_PORT_BASE", "GANG_PORT_SPAN", "master_endpoint"]

DEFAULT_GANG_PORT_BASE = 29500
GANG_PORT_SPAN = 2048  # ports base .. base + 2047: 1024 by GPU index, 1024 hashed
_LOOPBACK = "127.0.0.1"


def master_endpoint(
    job_id: str, master: Node, tasks: tuple[TaskSlot, ...], base: int
) -> tuple[str, int]:
    """(MASTER_ADDR, MASTER_PORT) of a gang attempt whose rank 0 runs on `master`."""
    address = dict(master.labels).get("address")
    if address is None:
        return _LOOPBACK, 0
    half = GANG_PORT_SPAN // 2
    first = tasks[0].gpu_indices
    if not first or first[0] >= half:
        return address, base + half + zlib.crc32(job_id.encode()) % half
    if address == "localhost" or address.startswith("127."):
        return address, base + half + zlib.crc32(f"{master.name}/{first[0]}".encode()) % half
    return address, base + first[0]
