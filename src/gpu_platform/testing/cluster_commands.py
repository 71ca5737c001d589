"""Hypothesis strategies for cluster-state commands (public: drive your own replicas with them).

`command_strategies(...)` maps every `cluster_state.Command` class to a strategy (a JobBatch's
items are drawn from the job commands' strategies; an empty batch, which is refused, occurs);
the names come from small pools (nodes `n0..`, jobs `j0..`, GPU indices 0..3, epochs 1..8) so
that random sequences hit existing entities often and both accepted and refused commands occur.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from gpu_platform.domain.cluster_state import (
    AbortJob,
    AnnounceServer,
    BindJob,
    BootstrapAdmin,
    CancelArray,
    CancelJob,
    CheckNodes,
    Command,
    CompleteGpuReset,
    CreateTenant,
    DeleteRunAsGrant,
    FinishJob,
    IssueToken,
    JobBatch,
    NodeHeartbeat,
    RegisterNode,
    RemoveNode,
    ReportEcc,
    ReportGpuLost,
    ReportThermal,
    ReportXid,
    RequeueJob,
    RevokeToken,
    SetGpuAdmin,
    SetNodeAdmin,
    SetQuota,
    SetRunAsGrant,
    StartJob,
    SubmitArray,
    SubmitJob,
)
from gpu_platform.domain.job_batches import BATCHABLE
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.job_array import ArraySpec
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.testing.service_commands import service_command_strategies
from gpu_platform.testing.strategies import described_nodes

__all__ = ["cluster_commands", "command_strategies", "quotas"]

_TIMES = st.integers(0, 2_000).map(float) | st.floats(0, 1e9, allow_nan=False)
_REASONS = st.text(alphabet="abc xyz", max_size=6)
_OPT = st.none() | st.integers(0, 64)


def quotas() -> st.SearchStrategy[Quota]:
    return st.builds(
        Quota,
        gpus=st.integers(0, 64),
        gpu_memory_bytes=_OPT,
        cpu_milli=_OPT,
        borrowing_limit=_OPT,
        lending_limit=_OPT,
        cohort=st.none() | st.sampled_from(["c1", "c2"]),
    )


def _specs(jobs: tuple[str, ...]) -> st.SearchStrategy[JobSpec]:
    return st.builds(
        JobSpec,
        command=st.just(("train", "--x")),
        gpus=st.integers(0, 3),
        tenant=st.sampled_from(["default", "team-a"]),
        priority=st.integers(-3, 3),
        env=st.just((("A", "1"),)),
        max_attempts=st.integers(1, 3),
        retry_backoff_s=st.sampled_from([0.0, 2.0]),
        tasks=st.integers(1, 2),
        depends_on=st.lists(st.sampled_from(jobs), max_size=1).map(tuple),
        gpu_models=st.sampled_from([(), ("A100-SXM4-80GB",)]),
    )


def command_strategies(
    node_names: tuple[str, ...] = ("n0", "n1", "n2"),
    job_ids: tuple[str, ...] = ("j0", "j1", "j2", "j3"),
) -> dict[type[Any], st.SearchStrategy[Any]]:
    """One strategy per command class (every member of the `Command` union)."""
    node = st.sampled_from(node_names)
    job = st.sampled_from(job_ids)
    index = st.integers(0, 3)
    epoch = st.integers(1, 8)
    indices = st.lists(index, min_size=0, max_size=3, unique=True).map(tuple)
    admin = st.sampled_from(["drain", "offline", "online"])
    strategies: dict[type[Any], st.SearchStrategy[Any]] = {
        SubmitJob: st.builds(SubmitJob, job, _specs(job_ids), _TIMES),
        BindJob: st.builds(
            BindJob,
            job,
            node,
            indices,
            _TIMES,
            peers=st.lists(st.tuples(node, indices), max_size=1).map(tuple),
            borrowing=st.booleans(),
            start=st.booleans(),
        ),
        StartJob: st.builds(StartJob, job, epoch, _TIMES),
        FinishJob: st.builds(
            FinishJob, job, epoch, st.none() | st.integers(0, 2), _TIMES, _REASONS
        ),
        CancelJob: st.builds(CancelJob, job, _TIMES, _REASONS),
        RequeueJob: st.builds(RequeueJob, job, epoch, _TIMES, _REASONS),
        AbortJob: st.builds(AbortJob, job, epoch, _TIMES, _REASONS),
        ReportXid: st.builds(ReportXid, node, index, st.sampled_from([13, 31, 48, 79, 95]), _TIMES),
        ReportEcc: st.builds(
            ReportEcc,
            node,
            index,
            st.integers(0, 20),
            st.integers(0, 3),
            st.booleans(),
            st.booleans(),
            _TIMES,
        ),
        ReportThermal: st.builds(
            ReportThermal,
            node,
            index,
            st.sampled_from([40.0, 85.5, 95.0]),
            st.integers(0, 64),
            _TIMES,
        ),
        ReportGpuLost: st.builds(ReportGpuLost, node, index, _TIMES, _REASONS),
        CompleteGpuReset: st.builds(CompleteGpuReset, node, index, st.booleans(), _TIMES, _REASONS),
        SetGpuAdmin: st.builds(SetGpuAdmin, node, index, admin, _REASONS, _TIMES, st.booleans()),
        SetNodeAdmin: st.builds(SetNodeAdmin, node, admin, _REASONS, _TIMES, st.booleans()),
        NodeHeartbeat: st.builds(NodeHeartbeat, node, _TIMES),
        CheckNodes: st.builds(CheckNodes, _TIMES)
        | st.builds(  # as a leader that tracks heartbeats in memory proposes it
            CheckNodes,
            _TIMES,
            st.lists(st.tuples(node, st.integers(0, 600).map(float)), max_size=3).map(tuple),
        ),
        RegisterNode: node.flatmap(lambda n: st.builds(RegisterNode, described_nodes(n), _TIMES)),
        RemoveNode: st.builds(RemoveNode, node, _REASONS, _TIMES),
        SetQuota: st.builds(SetQuota, st.sampled_from(["team-a", "team-b"]), st.none() | quotas()),
        AnnounceServer: st.builds(
            AnnounceServer,
            st.integers(1, 3),
            st.sampled_from(["http://10.0.0.1:8080", "http://[::1]:9000"]),
            st.sampled_from(["10.0.0.1:50051", ""]),
            _TIMES,
        ),
        SubmitArray: st.builds(SubmitArray, job, _specs(job_ids), _arrays(), _TIMES),
        CancelArray: st.builds(CancelArray, job, _TIMES, _REASONS),
        **service_command_strategies(job_ids),
        **_access_strategies(),
    }
    items = st.one_of(*(strategies[c] for c in BATCHABLE))
    strategies[JobBatch] = st.builds(JobBatch, st.lists(items, max_size=4).map(tuple))
    return strategies


def _access_strategies() -> dict[type[Any], st.SearchStrategy[Any]]:
    """Small pools of tenants and token ids, so issues, revocations and refusals all occur."""
    tenant = st.sampled_from(["default", "team-a", "bad name"])
    token = st.sampled_from(["tok_a", "tok_b", "tok_c"])
    digest = st.sampled_from(["d" * 64, "e" * 64, "f" * 64])
    name = st.sampled_from(["ci", "alice"])
    role = st.sampled_from(list(Role))
    account = st.sampled_from(["alice", "root", "bad user"])
    accounts = st.lists(account, max_size=3).map(tuple)  # unsorted, empty: refusals occur
    return {
        CreateTenant: st.builds(CreateTenant, tenant, _TIMES),
        IssueToken: st.builds(
            IssueToken, token, digest, name, tenant, role, _TIMES, st.none() | _TIMES
        ),
        RevokeToken: st.builds(RevokeToken, token, _TIMES),
        BootstrapAdmin: st.builds(BootstrapAdmin, token, digest, name, tenant, _TIMES),
        SetRunAsGrant: st.builds(SetRunAsGrant, tenant, accounts, st.booleans()),
        DeleteRunAsGrant: st.builds(DeleteRunAsGrant, tenant),
    }


def _arrays() -> st.SearchStrategy[ArraySpec]:
    indices = st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True)
    return st.builds(ArraySpec, indices.map(lambda xs: tuple(sorted(xs))), st.integers(0, 2))


def cluster_commands(
    node_names: tuple[str, ...] = ("n0", "n1", "n2"),
    job_ids: tuple[str, ...] = ("j0", "j1", "j2", "j3"),
) -> st.SearchStrategy[Command]:
    """Any command over the given name pools."""
    return st.one_of(*command_strategies(node_names, job_ids).values())
