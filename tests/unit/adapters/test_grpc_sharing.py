"""Sharing fields over gRPC and REST on one real loopback server: a share submitted over gRPC
reads back the same over both, `ListGpus` shows it on its GPU, bad requests are refused by both
naming the field."""

from __future__ import annotations

import grpc
import pytest

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from tests.unit.adapters.test_grpc_api import Both, both, rest_job

__all__ = ["both"]  # the fixture, shared with the parity suite

GIB = 1 << 30


def test_a_share_over_grpc_reads_back_the_same_over_both_and_bad_ones_name_their_field(
    both: Both,
) -> None:
    request = pb.SubmitJobRequest(
        command=["fake-forever"], gpu_milli=250, gpu_memory_bytes=10 * GIB, cpu_milli=1500,
        vendor="nvidia", sharing="mps",
    )  # fmt: skip
    job = both.jobs.SubmitJob(request, timeout=5)
    assert (job.gpus, job.gpu_milli, job.gpu_memory_bytes, job.cpu_milli) == (
        1,
        250,
        10 * GIB,
        1500,
    )
    assert (job.vendor, job.sharing) == ("nvidia", "mps")
    both.wait_state(job.id, "RUNNING")
    rest = rest_job(both, job.id)
    assert (rest["gpus"], rest["gpu_milli"], rest["gpu_memory_bytes"]) == (1, 250, 10 * GIB)
    assert (rest["cpu_milli"], rest["vendor"], rest["sharing"]) == (1500, "nvidia", "mps")
    gpus = both.cluster.ListGpus(pb.ListGpusRequest(), timeout=5).gpus
    (shared,) = [g for g in gpus if g.shares]
    (holder,) = shared.shares
    assert (holder.job_id, holder.gpu_milli, holder.pinned_memory_bytes) == (job.id, 250, 10 * GIB)
    status = both.cluster.GetStatus(pb.GetStatusRequest(), timeout=5)
    assert (status.gpus_shared, status.shares) == (1, 1)
    refused_by_both(both)  # on the same server: each case costs no new one


BAD = [  # (REST body, gRPC request, the field both must name)
    ({"gpus": 2, "gpu_milli": 500}, pb.SubmitJobRequest(gpus=2, gpu_milli=500), "gpu_milli"),
    ({"gpu_milli": 0}, pb.SubmitJobRequest(gpu_milli=0), "gpu_milli"),
    ({"gpus": 1, "vendor": "3dfx"}, pb.SubmitJobRequest(gpus=1, vendor="3dfx"), "vendor"),
    ({"gpus": 1, "sharing": "mps"}, pb.SubmitJobRequest(gpus=1, sharing="mps"), "sharing"),
    (
        {"gpus": 1, "gpu_memory_bytes": 1 << 50},
        pb.SubmitJobRequest(gpus=1, gpu_memory_bytes=1 << 50),
        "gpu_memory_bytes",
    ),
]


def refused_by_both(both: Both) -> None:
    for rest_body, grpc_request, field in BAD:
        r = both.rest.post("/v1/jobs", json={"command": ["x"], **rest_body})
        assert r.status_code == 422 and r.json()["field"] == field, r.text
        grpc_request.command.append("x")
        with pytest.raises(grpc.RpcError) as err:
            both.jobs.SubmitJob(grpc_request, timeout=5)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(field), err.value.details()
