"""A service crosses REST, gRPC and the CLI's JSON through one field mapping
(`adapters.inbound.service_fields`): every wire carries every field, a spec comes back
unchanged from each of them, and a replica reads the same over REST and gRPC."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.inbound.grpc.services import service_spec_from_pb, service_to_pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.rest.services import ReplicaOut, ServiceIn
from gpu_platform.adapters.inbound.service_fields import (
    SPEC_FIELDS,
    spec_from_values,
    spec_values,
)
from gpu_platform.domain.services.model import ENGINES, ServiceSpec
from gpu_platform.ports.inbound.services import ReplicaInfo, ServiceInfo

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)
_env_name = st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True)
_seconds = st.floats(min_value=0.001, max_value=3600, allow_nan=False, allow_infinity=False)

specs = st.builds(
    ServiceSpec,
    name=_word,
    command=st.lists(_word, max_size=4).map(tuple),
    replicas=st.integers(0, 256),
    gpus=st.integers(0, 8),
    tenant=_word,
    priority=st.integers(-1000, 1000),
    preemptible=st.booleans(),
    port_env=_env_name,
    health_path=_word.map(lambda w: "/" + w),
    engine=st.sampled_from(ENGINES),
    model=st.text(max_size=20),
    env=st.dictionaries(_env_name, st.text(max_size=10), max_size=4).map(
        lambda d: tuple(sorted(d.items()))
    ),
    startup_timeout_s=_seconds,
    unhealthy_timeout_s=_seconds,
    backoff_s=_seconds,
    max_backoff_s=_seconds,
    drain_s=st.floats(min_value=0, max_value=3600, allow_nan=False),
    gpu_milli=st.integers(1, 1000),
    gpu_memory_bytes=st.none() | st.integers(1, 1 << 40),
)


def test_every_wire_names_exactly_the_fields_of_a_service_spec() -> None:
    assert set(ServiceIn.model_fields) == set(SPEC_FIELDS)
    assert set(pb.ServiceSpec.DESCRIPTOR.fields_by_name) == set(SPEC_FIELDS)


@settings(max_examples=60, deadline=None)
@given(specs)
def test_a_spec_comes_back_unchanged_from_wire_values(spec: ServiceSpec) -> None:
    assert spec_from_values(spec_values(spec), "someone-else") == spec


@settings(max_examples=60, deadline=None)
@given(specs)
def test_a_spec_comes_back_unchanged_from_the_rest_body(spec: ServiceSpec) -> None:
    body = ServiceIn.model_validate_json(ServiceIn.of(spec).model_dump_json())
    assert body.to_spec("someone-else") == spec


@settings(max_examples=60, deadline=None)
@given(specs)
def test_a_spec_comes_back_unchanged_from_the_grpc_message(spec: ServiceSpec) -> None:
    info = ServiceInfo(spec, generation=1, created_at=0.0, deleting=False, replicas=())
    wire = pb.Service.FromString(service_to_pb(info).SerializeToString())
    assert service_spec_from_pb(wire.spec, "someone-else") == spec


def test_an_empty_tenant_on_the_wire_is_the_callers() -> None:
    values = spec_values(ServiceSpec("web", ("serve",), tenant="a"))
    assert spec_from_values({**values, "tenant": None}, "mine").tenant == "mine"
    assert spec_from_values({**values, "tenant": ""}, "mine").tenant == "mine"


replicas = st.builds(
    ReplicaInfo,
    replica_id=_word,
    generation=st.integers(0, 1000),
    state=st.sampled_from(["PENDING", "STARTING", "READY", "BACKOFF"]),
    job_id=_word,
    node=_word,
    gpus=st.lists(st.integers(0, 7), max_size=4).map(tuple),
    address=_word,
    ready=st.booleans(),
    draining=st.booleans(),
    restarts=st.integers(0, 100),
    detail=st.text(max_size=20),
    not_before=st.just(0.0) | st.floats(min_value=1, max_value=2e9, allow_nan=False),
)


def test_rest_and_grpc_name_every_field_of_a_replica() -> None:
    names = {f.name for f in fields(ReplicaInfo)} - {"not_before"} | {"restart_at"}
    assert set(ReplicaOut.model_fields) == names
    assert set(pb.ServiceReplica.DESCRIPTOR.fields_by_name) == names


@settings(max_examples=60, deadline=None)
@given(replicas)
def test_a_replica_reads_the_same_over_rest_and_grpc(r: ReplicaInfo) -> None:
    info = ServiceInfo(ServiceSpec("web", ("serve",)), 1, 0.0, False, (r,))
    rest = ReplicaOut.of(r).model_dump()
    grpc_side = pb.Service.FromString(service_to_pb(info).SerializeToString()).replicas[0]
    for name in rest:
        if name != "restart_at":
            assert rest[name] == type(rest[name])(getattr(grpc_side, name)), name
    assert rest["restart_at"] == (r.not_before or None)  # no restart pending: none
    assert grpc_side.restart_at == r.not_before  # proto3: unset reads 0.0
