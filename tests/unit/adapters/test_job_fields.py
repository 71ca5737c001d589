"""A job crosses REST and gRPC through one field mapping (`adapters.inbound.job_fields`):
every wire carries the spec's fields (the proto's two gaps named), a spec comes back unchanged
from each of them, and a job, an array, a GPU and the status read the same over REST and gRPC."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from google.protobuf.message import Message
from hypothesis import given, settings

from gpu_platform.adapters.inbound.grpc.convert import (
    array_to_pb,
    gpu_to_pb,
    job_to_pb,
    spec_from_pb,
    status_to_pb,
)
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.job_fields import (
    BODY_FIELDS,
    SPEC_FIELDS,
    array_values,
    gpu_values,
    job_values,
    spec_from_values,
    spec_values,
    status_values,
)
from gpu_platform.adapters.inbound.rest.cluster_schemas import ClusterStatusOut, GpuOut
from gpu_platform.adapters.inbound.rest.job_schemas import ArrayOut, ArraySubmit, JobOut, JobSubmit
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.gpu import Gpu, GpuState, Vendor
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.job_array import ArraySpec
from gpu_platform.domain.scheduling.model import PendingReason
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo
from tests.unit.adapters.job_wire_strategies import (
    array_infos,
    gpu_infos,
    job_specs,
    jobs,
    reasons,
    statuses,
)

SPEC = JobSpec(("true",), gpus=1, tenant="a")
_names = pb.SubmitJobRequest.DESCRIPTOR.fields_by_name


def _fields(message: type[Message]) -> set[str]:
    return set(message.DESCRIPTOR.fields_by_name)


def test_every_wire_names_exactly_the_fields_of_a_job_spec() -> None:
    assert set(SPEC_FIELDS) - set(BODY_FIELDS) == {"client_token", "spread"}
    assert set(JobSubmit.model_fields) == set(BODY_FIELDS)
    assert set(ArraySubmit.model_fields) == set(BODY_FIELDS) | {"array"}
    # the token is its request_id
    assert _fields(pb.SubmitJobRequest) == set(BODY_FIELDS) | {"request_id"}


def test_rest_and_grpc_name_every_field_of_a_job_and_its_views() -> None:
    job = Job("j-1", SPEC, JobState.QUEUED, 0.0)
    names = set(job_values(job))
    assert set(JobOut.model_fields) == names
    flat = {"array_id", "array_index", "array"}
    assert _fields(pb.Job) == names - {"array"} | flat
    array = set(array_values(ArrayInfo("a-1", SPEC, ArraySpec((0, 1)), 0.0, {}, "")))
    assert set(ArrayOut.model_fields) == array
    assert _fields(pb.JobArray) == array
    gpu = set(
        gpu_values(
            GpuInfo(Gpu("GPU-1", 0, "n1", Vendor.NVIDIA, "A100", 1), GpuState.AVAILABLE, None)
        )
    )
    assert set(GpuOut.model_fields) == gpu
    assert _fields(pb.Gpu) == gpu
    status = set(status_values(ClusterStatus("sim", True, 1, 1, 1, {}, ())))
    assert set(ClusterStatusOut.model_fields) == status == _fields(pb.ClusterStatus)


@settings(max_examples=50, deadline=None)
@given(job_specs())
def test_a_spec_comes_back_unchanged_from_wire_values(spec: JobSpec) -> None:
    assert spec_from_values(spec_values(spec), "someone-else") == spec


@settings(max_examples=50, deadline=None)
@given(job_specs())
def test_a_spec_comes_back_unchanged_from_the_rest_body(spec: JobSpec) -> None:
    values = spec_values(spec)
    body = json.dumps({name: values[name] for name in BODY_FIELDS})
    back = JobSubmit.model_validate_json(body).to_spec("someone-else")
    assert back == replace(spec, client_token=None)  # the token is the Idempotency-Key header


def request_of(spec: JobSpec) -> pb.SubmitJobRequest:
    """The message a client sends for `spec` (None: not set)."""
    values = {k: v for k, v in spec_values(spec).items() if k in _names and v is not None}
    return pb.SubmitJobRequest(**values, request_id=spec.client_token)


@settings(max_examples=50, deadline=None)
@given(job_specs())
def test_a_spec_comes_back_unchanged_from_the_grpc_message(spec: JobSpec) -> None:
    wire = pb.SubmitJobRequest.FromString(request_of(spec).SerializeToString())
    assert spec_from_pb(wire, "someone-else") == spec


def test_an_empty_tenant_on_the_wire_is_the_callers() -> None:
    values = spec_values(SPEC)
    assert spec_from_values({**values, "tenant": None}, "mine").tenant == "mine"
    assert spec_from_values({**values, "tenant": ""}, "mine").tenant == "mine"
    assert spec_from_pb(pb.SubmitJobRequest(command=["true"]), "mine").tenant == "mine"


def test_a_share_implies_one_gpu_and_with_more_gpus_both_wires_name_gpu_milli() -> None:
    rest = JobSubmit.model_validate({"command": ["true"], "gpu_milli": 250}).to_spec()
    grpc_side = spec_from_pb(pb.SubmitJobRequest(command=["true"], gpu_milli=250))
    assert rest == grpc_side and (rest.gpus, rest.gpu_milli) == (1, 250)
    too_many: dict[str, Any] = {"command": ["true"], "gpus": 2, "gpu_milli": 500}
    with pytest.raises(InvalidRequest) as rest_err:
        JobSubmit.model_validate(too_many).to_spec()
    with pytest.raises(InvalidRequest) as grpc_err:
        spec_from_pb(pb.SubmitJobRequest(**too_many))
    assert rest_err.value.field == grpc_err.value.field == "gpu_milli"


def grpc_values(msg: Message) -> dict[str, Any]:
    """`msg` as plain values: an optional field not set is None, messages are dicts."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if fd.has_presence and not msg.HasField(fd.name):
            out[fd.name] = None
        elif fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            out[fd.name] = dict(value)
        elif fd.is_repeated:
            out[fd.name] = [grpc_values(v) if isinstance(v, Message) else v for v in value]
        else:
            out[fd.name] = grpc_values(value) if isinstance(value, Message) else value
    return out


def assert_same(rest: dict[str, Any], grpc_side: dict[str, Any]) -> None:
    """Every field both wires name holds the same value; a plain proto3 field reads its zero
    value where REST says None."""
    both = rest.keys() & grpc_side.keys()
    assert both
    for name in both:
        r, g = rest[name], grpc_side[name]
        assert r == g or (r is None and g in ("", 0)), name


@settings(max_examples=50, deadline=None)
@given(jobs, reasons)
def test_a_job_reads_the_same_over_rest_and_grpc(job: Job, why: PendingReason | None) -> None:
    rest = json.loads(JobOut.of(job, why).model_dump_json())
    grpc_side = grpc_values(pb.Job.FromString(job_to_pb(job, why).SerializeToString()))
    task = rest.pop("array")
    assert_same(rest, grpc_side)
    flat = {"id": grpc_side["array_id"], "index": grpc_side["array_index"]}
    assert task == (None if flat["id"] is None else {**flat, "array": grpc_side["array"]})


@settings(max_examples=30, deadline=None)
@given(array_infos, gpu_infos, statuses)
def test_an_array_a_gpu_and_the_status_read_the_same_over_rest_and_grpc(
    array: ArrayInfo, gpu: GpuInfo, status: ClusterStatus
) -> None:
    def rest(model: Any) -> dict[str, Any]:
        return json.loads(model.model_dump_json())  # type: ignore[no-any-return]

    def grpc_side(msg: Message) -> dict[str, Any]:
        return grpc_values(type(msg).FromString(msg.SerializeToString()))

    assert_same(rest(ArrayOut.of(array)), grpc_side(array_to_pb(array)))
    assert_same(rest(GpuOut.of(gpu)), grpc_side(gpu_to_pb(gpu)))
    assert_same(rest(ClusterStatusOut.of(status)), grpc_side(status_to_pb(status)))
