"""Job <-> JSON-able dict, versioned so stored records survive schema growth."""

from __future__ import annotations

from typing import Any

from gpu_platform.domain.model.job import Allocation, Job, JobSpec, JobState, TaskSlot

__all__ = ["SCHEMA_VERSION", "job_from_dict", "job_to_dict"]

SCHEMA_VERSION = 1


def job_to_dict(job: Job) -> dict[str, Any]:
    spec = job.spec
    alloc = job.allocation
    return {
        "v": SCHEMA_VERSION,
        "id": job.id,
        "seq": job.seq,
        "state": job.state.value,
        "submitted_at": job.submitted_at,
        "attempt": job.attempt,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "exit_code": job.exit_code,
        "reason": job.reason,
        "releasing": job.releasing,
        "not_before": job.not_before,
        "borrowing": job.borrowing,
        "history": [[t, s.value, r] for t, s, r in job.history],
        "spec": {
            "command": list(spec.command),
            "gpus": spec.gpus,
            "name": spec.name,
            "tenant": spec.tenant,
            "priority": spec.priority,
            "env": [list(kv) for kv in spec.env],
            "cwd": spec.cwd,
            "memory_bytes": spec.memory_bytes,
            "time_limit_s": spec.time_limit_s,
            "user": spec.user,
            "max_attempts": spec.max_attempts,
            "retry_backoff_s": spec.retry_backoff_s,
            "tasks": spec.tasks,
            "preemptible": spec.preemptible,
            "depends_on": list(spec.depends_on),
            "gpu_models": list(spec.gpu_models),
            "nvlink": spec.nvlink,
            "numa": spec.numa,
            "same_rack": spec.same_rack,
            "mig_profile": spec.mig_profile,
        },
        "allocation": None
        if alloc is None
        else {
            "node": alloc.node,
            "gpu_indices": list(alloc.gpu_indices),
            "gpu_uuids": list(alloc.gpu_uuids),
            "epoch": alloc.epoch,
            "numa_nodes": list(alloc.numa_nodes),
            "peers": [
                [p.node, list(p.gpu_indices), list(p.gpu_uuids), list(p.numa_nodes)]
                for p in alloc.peers
            ],
        },
    }


def job_from_dict(data: dict[str, Any]) -> Job:
    if data.get("v") != SCHEMA_VERSION:
        raise ValueError(f"job record schema {data.get('v')!r} is not {SCHEMA_VERSION}")
    s = data["spec"]
    a = data["allocation"]
    return Job(
        id=data["id"],
        seq=data["seq"],
        spec=JobSpec(
            command=tuple(s["command"]),
            gpus=s["gpus"],
            name=s["name"],
            tenant=s["tenant"],
            priority=s["priority"],
            env=tuple((k, v) for k, v in s["env"]),
            cwd=s["cwd"],
            memory_bytes=s.get("memory_bytes"),
            time_limit_s=s.get("time_limit_s"),
            user=s.get("user"),
            max_attempts=s.get("max_attempts", 3),
            retry_backoff_s=s.get("retry_backoff_s", 0.0),
            tasks=s.get("tasks", 1),
            preemptible=s.get("preemptible", True),
            depends_on=tuple(s.get("depends_on", ())),
            gpu_models=tuple(s.get("gpu_models", ())),
            nvlink=s.get("nvlink", "preferred"),
            numa=s.get("numa", "preferred"),
            same_rack=s.get("same_rack", "preferred"),
            mig_profile=s.get("mig_profile"),
        ),
        state=JobState(data["state"]),
        submitted_at=data["submitted_at"],
        attempt=data["attempt"],
        allocation=None
        if a is None
        else Allocation(
            node=a["node"],
            gpu_indices=tuple(a["gpu_indices"]),
            gpu_uuids=tuple(a["gpu_uuids"]),
            epoch=a["epoch"],
            numa_nodes=tuple(a["numa_nodes"]),
            peers=tuple(
                TaskSlot(node, tuple(idx), tuple(uuids), tuple(numa))
                for node, idx, uuids, numa in a.get("peers", ())
            ),
        ),
        started_at=data["started_at"],
        finished_at=data["finished_at"],
        exit_code=data["exit_code"],
        reason=data["reason"],
        releasing=data["releasing"],
        not_before=data.get("not_before", 0.0),
        borrowing=data.get("borrowing", False),
        history=tuple((t, JobState(st), r) for t, st, r in data["history"]),
    )
