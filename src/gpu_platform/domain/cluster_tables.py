"""The indexed tables of the cluster state: nodes by name and jobs by id.

Each table is a dict that keeps an index up to date on every write, so queries that would
scan every node or job read the index instead: the node table re-indexes a node's RESETTING
GPUs and stamps the node changed (`ClusterState.changed_nodes_since`); the job table keeps the
ids of jobs that have not ended (or still hold GPUs), in submission order. `ClusterState`
checks both indexes against a full scan in `check_invariants`. Split from `cluster_state`
only for size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import Job
from gpu_platform.domain.model.node import Node

if TYPE_CHECKING:
    from gpu_platform.domain.cluster_state import ClusterState

__all__ = ["JobTable", "NodeTable"]


class NodeTable(dict[str, Node]):
    """Nodes by name; every write re-indexes the node's RESETTING GPUs, stamps it changed and
    drops the owner's hardware facts (`domain.hardware_facts`: rebuilt when next read)."""

    def __init__(self, owner: ClusterState) -> None:
        super().__init__()
        self._owner = owner

    def __setitem__(self, name: str, node: Node) -> None:
        resetting = self._owner._resetting
        old = self.get(name)
        if old is not None:
            for gpu in old.gpus:
                resetting.pop(gpu.uuid, None)
        for gpu in node.gpus:
            if gpu.state is GpuState.RESETTING:
                resetting[gpu.uuid] = gpu
        super().__setitem__(name, node)
        self._owner._facts = None
        self._owner._touch(name)

    def __delitem__(self, name: str) -> None:
        for gpu in self[name].gpus:
            self._owner._resetting.pop(gpu.uuid, None)
        super().__delitem__(name)
        self._owner._facts = None
        self._owner._touch(name)  # a kept view drops it


class JobTable(dict[str, Job]):
    """Jobs by id; keeps the ids of jobs that have not ended (`open`, submission order)."""

    def __init__(self) -> None:
        super().__init__()
        self.open: dict[str, None] = {}

    def __setitem__(self, job_id: str, job: Job) -> None:
        if job.terminal and not job.holds_gpus:
            self.open.pop(job_id, None)
        else:
            self.open[job_id] = None
        super().__setitem__(job_id, job)
