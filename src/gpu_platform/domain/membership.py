"""Membership commands of the cluster state machine: node registration, quotas, API servers.

Theory of operation: with the cluster state replicated (issue 10) everything a future `apply`
depends on must arrive through the log, so nodes, tenant quotas and where each server's APIs
listen are commands too. Split from `cluster_state` only for size (a mixin of `ClusterState`).

RegisterNode, by what the cluster already knows of the node's name:
- unknown: the node is added as given (READY unless it says otherwise), heard from at `now`;
- the same GPUs (uuid, index and model each): a heartbeat, exactly as `NodeHeartbeat` (a
  SUSPECT node goes READY, a DOWN one stays DOWN); other descriptive fields (labels, topology,
  NUMA, memory) are refreshed while GPU and node states are kept;
- other GPUs: replaced, unless a job holds one of its current GPUs (`Conflict`). GPUs whose
  uuid persists keep their fault state; the fault records of vanished GPUs are dropped.
A GPU uuid already present on another node is a `Conflict` (uuids are cluster-unique).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.events import (
    DomainEvent,
    NodeRegistered,
    NodeRemoved,
    QuotaChanged,
    ServerAnnounced,
)
from gpu_platform.domain.faults.commands import NodeHeartbeat
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.node import Node, NodeState
from gpu_platform.domain.scheduling.model import Quota

if TYPE_CHECKING:
    from gpu_platform.domain.model.job import Job

__all__ = [
    "AnnounceServer",
    "MembershipHandlers",
    "RegisterNode",
    "RemoveNode",
    "SetQuota",
    "registration_changes_nothing",
]


@dataclass(frozen=True, slots=True)
class RegisterNode:
    """A node's agent reports its node (GPUs, topology) at `now` (seconds since the epoch)."""

    node: Node
    now: float


@dataclass(frozen=True, slots=True)
class RemoveNode:
    """An operator removes node `node` for good (a retired host, a stray registration):
    refused while any job holds its GPUs or runs there. Its agent may register it again."""

    node: str
    reason: str
    now: float


@dataclass(frozen=True, slots=True)
class SetQuota:
    """Set `tenant`'s quota; None removes it."""

    tenant: str
    quota: Quota | None


@dataclass(frozen=True, slots=True)
class AnnounceServer:
    """The leader `server_id` serves REST at `http_url`, gRPC at `grpc_address` and the agents'
    streams at `agent_address` (host:port each)."""

    server_id: int
    http_url: str
    grpc_address: str
    now: float
    agent_address: str = ""


_DERIVED = (GpuState.ALLOCATED, GpuState.IN_USE)


def _identity(node: Node) -> tuple[tuple[str, int, str], ...]:
    return tuple(sorted((g.uuid, g.index, g.model) for g in node.gpus))


def registration_changes_nothing(old: Node | None, new: Node) -> bool:
    """Would `RegisterNode(new)` leave a node registered as `old` as it is, but for its
    heartbeat time? True for a READY node whose agent reports the same GPUs and the same
    description: its registration is then a heartbeat, which a replicated control plane does
    not commit (an election makes every agent say hello again; issue 21)."""
    if old is None or old.state is not NodeState.READY or _identity(old) != _identity(new):
        return False
    states = {g.uuid: g.state for g in old.gpus}
    gpus = tuple(replace(g, state=states[g.uuid]) for g in new.gpus)
    return replace(new, gpus=gpus, state=old.state) == old


class MembershipHandlers:
    """The membership half of ClusterState; see the module docstring."""

    _nodes: dict[str, Node]
    _jobs: dict[str, Job]
    _held: dict[str, str]
    _reasons: dict[str, str]
    _hot: dict[str, float]
    _ecc_seen: dict[str, int]
    _ecc_alerted: set[str]
    _last_heartbeat: dict[str, float]
    _quotas: dict[str, Quota]
    _servers: dict[int, tuple[str, str, str]]

    if TYPE_CHECKING:

        def holders(self, uuid: str) -> tuple[str, ...]: ...

        def _heartbeat(self, cmd: NodeHeartbeat) -> list[DomainEvent]: ...

    def _register(self, cmd: RegisterNode) -> list[DomainEvent]:
        new = cmd.node
        for gpu in new.gpus:
            if gpu.state in _DERIVED:
                raise InvalidRequest(
                    "node", f"gpu {new.name}:{gpu.index} reports {gpu.state}, a state only jobs set"
                )
        old = self._nodes.get(new.name)
        for other in self._nodes.values():
            if other.name == new.name:
                continue
            clash = {g.uuid for g in other.gpus} & {g.uuid for g in new.gpus}
            if clash:
                raise Conflict(
                    f"node {new.name}: GPU {min(clash)} is already registered on {other.name}"
                )
        if old is None:
            self._nodes[new.name] = new
            self._last_heartbeat[new.name] = cmd.now
            return [NodeRegistered(new.name, len(new.gpus), replaced=False)]
        if _identity(old) == _identity(new):
            states = {g.uuid: g.state for g in old.gpus}
            gpus = tuple(replace(g, state=states[g.uuid]) for g in new.gpus)
            self._nodes[new.name] = replace(new, gpus=gpus, state=old.state)
            return self._heartbeat(NodeHeartbeat(new.name, cmd.now))
        busy = sorted(h for g in old.gpus for h in self.holders(g.uuid))
        if busy:
            raise Conflict(
                f"node {new.name} changed its GPUs while job {busy[0]} holds some of them; "
                "it can re-register with other GPUs once they are released"
            )
        states = {g.uuid: g.state for g in old.gpus}
        gpus = tuple(replace(g, state=states.get(g.uuid, g.state)) for g in new.gpus)
        self._nodes[new.name] = replace(new, gpus=gpus, state=old.state)
        kept = {g.uuid for g in new.gpus}
        for gpu in old.gpus:
            if gpu.uuid not in kept:
                self._reasons.pop(gpu.uuid, None)
                self._hot.pop(gpu.uuid, None)
                self._ecc_seen.pop(gpu.uuid, None)
                self._ecc_alerted.discard(gpu.uuid)
        events: list[DomainEvent] = [NodeRegistered(new.name, len(new.gpus), replaced=True)]
        return events + self._heartbeat(NodeHeartbeat(new.name, cmd.now))

    def _remove_node(self, cmd: RemoveNode) -> list[DomainEvent]:
        node = self._nodes.get(cmd.node)
        if node is None:
            raise NotFound("node", cmd.node)
        uuids = {g.uuid for g in node.gpus}
        busy = sorted(
            j.id
            for j in self._jobs.values()
            if j.holds_gpus
            and j.allocation is not None
            and (cmd.node in j.allocation.nodes or uuids & set(j.allocation.all_gpu_uuids))
        )
        if busy:
            raise Conflict(
                f"node {cmd.node} holds work (job {busy[0]}{', ...' if len(busy) > 1 else ''}): "
                "drain it and let the work finish, or offline --force, before removing it"
            )
        del self._nodes[cmd.node]
        for key in (cmd.node, *uuids):
            self._reasons.pop(key, None)
            self._hot.pop(key, None)
            self._ecc_seen.pop(key, None)
            self._ecc_alerted.discard(key)
        self._last_heartbeat.pop(cmd.node, None)
        return [NodeRemoved(cmd.node, cmd.reason)]

    def _set_quota(self, cmd: SetQuota) -> list[DomainEvent]:
        if not cmd.tenant:
            raise InvalidRequest("tenant", "must be non-empty")
        if cmd.quota is None:
            self._quotas.pop(cmd.tenant, None)
        else:
            self._quotas[cmd.tenant] = cmd.quota
        return [QuotaChanged(cmd.tenant, cmd.quota)]

    def _announce(self, cmd: AnnounceServer) -> list[DomainEvent]:
        if not cmd.http_url:
            raise InvalidRequest("http_url", "must be non-empty")
        self._servers[cmd.server_id] = (cmd.http_url, cmd.grpc_address, cmd.agent_address)
        return [ServerAnnounced(cmd.server_id, cmd.http_url, cmd.grpc_address)]
