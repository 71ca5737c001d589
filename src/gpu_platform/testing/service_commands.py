"""Hypothesis strategies for the service commands (`domain.services.commands`), over small
name pools so random sequences hit existing services and replicas often."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from gpu_platform.domain.services.commands import (
    CreateService,
    DeleteService,
    DrainReplica,
    EndReplica,
    LaunchReplica,
    ReportReplicaHealth,
    ScaleService,
    UpdateService,
)
from gpu_platform.domain.services.model import ServiceSpec

__all__ = ["service_command_strategies", "service_specs"]

_TIMES = st.integers(0, 2_000).map(float)
_NAMES = ("s0", "s1")


def service_specs(names: tuple[str, ...] = _NAMES) -> st.SearchStrategy[ServiceSpec]:
    return st.builds(
        ServiceSpec,
        name=st.sampled_from(names),
        command=st.sampled_from([("serve", "--port", "${PORT}"), ("srv",)]),
        replicas=st.integers(0, 3),
        gpus=st.integers(0, 2),
        tenant=st.sampled_from(["default", "team-a"]),
        priority=st.integers(-2, 2),
        env=st.sampled_from([(), (("A", "1"),)]),
        backoff_s=st.sampled_from([1.0, 2.0]),
    )


def service_command_strategies(
    job_ids: tuple[str, ...] = ("j0", "j1", "j2", "j3"),
) -> dict[type[Any], st.SearchStrategy[Any]]:
    """One strategy per service command class."""
    name = st.sampled_from(_NAMES)
    replica = st.builds(lambda n, k: f"{n}-{k}", name, st.integers(1, 3))
    job = st.sampled_from(job_ids)
    reason = st.sampled_from(["", "exited 1", "drained"])
    return {
        CreateService: st.builds(CreateService, service_specs(), _TIMES),
        UpdateService: st.builds(UpdateService, service_specs(), _TIMES),
        ScaleService: st.builds(ScaleService, name, st.integers(0, 3), _TIMES),
        DeleteService: st.builds(DeleteService, name, _TIMES),
        LaunchReplica: st.builds(
            lambda r, j, t: LaunchReplica(r.rsplit("-", 1)[0], r, j, t), replica, job, _TIMES
        ),
        EndReplica: st.builds(
            lambda r, j, why, t: EndReplica(r.rsplit("-", 1)[0], r, j, why, t),
            replica,
            job,
            reason,
            _TIMES,
        ),
        DrainReplica: st.builds(
            lambda r, why, t: DrainReplica(r.rsplit("-", 1)[0], r, why, t), replica, reason, _TIMES
        ),
        ReportReplicaHealth: st.builds(
            ReportReplicaHealth,
            job,
            st.integers(1, 8),
            st.booleans(),
            st.sampled_from(["", "http://127.0.0.1:31000"]),
            reason,
            _TIMES,
        ),
    }
