"""The authorization matrix: every endpoint x role x own/other tenant, through REST and gRPC,
with the same outcome on both (parity). The server runs with auth on, built through the real
container (SQLite token store, the JSON-lines audit chain) with in-memory job fakes.

Principals are an admin, an operator and a user, all of tenant "a"; "own" targets tenant "a",
"other" tenant "b". Users see another tenant's job as 404 (never 403: ids are not disclosed).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.tenancy import Principal, Role
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    SequentialJobIds,
)

ROLES = [Role.ADMIN, Role.OPERATOR, Role.USER]
OK = grpc.StatusCode.OK
GRPC_OF = {
    200: OK,
    201: OK,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
}


class World:
    def __init__(self, container: Container, rest: TestClient, channel: grpc.Channel) -> None:
        self.container, self.rest = container, rest
        self.jobs = pb_grpc.JobServiceStub(channel)
        self.cluster = pb_grpc.ClusterServiceStub(channel)
        self.admin = pb_grpc.AdminServiceStub(channel)
        access = container.access()
        boot = access.bootstrap()
        assert boot is not None
        root = Principal("root", "default", Role.ADMIN, boot.info.token_id)
        for tenant in ("a", "b"):
            access.create_tenant(root, tenant)
        self.root = root
        self.secrets = {
            role: access.create_token(root, f"{role}-of-a", "a", role).secret for role in ROLES
        }

    def job(self, tenant: str) -> str:
        spec = JobSpec(command=("fake-forever",), tenant=tenant)
        return self.container.jobs_api().submit(spec).id

    def spare_token(self) -> str:
        return (
            self.container.access().create_token(self.root, "spare", "a", Role.USER).info.token_id
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp: Path = tmp_path_factory.mktemp("authz")
    settings = Settings(
        server_id=0,  # the embedded core: these test the APIs over in-process fakes
        data_dir=tmp,
        grpc_port=0,
        auth="on",
        rate_limit_per_second=0,
        auth_failures_per_minute=0,  # the matrix presents bad tokens on purpose, many times
        schedule_interval_seconds=0.05,
        health_source="sim",
    )
    container = Container(settings=settings)
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(FakeJobRunner()))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    server = container.grpc_server()
    assert server is not None
    try:
        with TestClient(container.rest_app()) as rest, grpc.insecure_channel(server.address) as ch:
            yield World(container, rest, ch)
    finally:
        container.shutdown_resources()


Rest = Callable[[World, dict[str, str], str], int]
Grpc = Callable[[World, tuple[tuple[str, str], ...], str], Any]
Expect = Callable[[Role, bool], int]


def job_scoped(role: Role, own: bool) -> int:
    return 200 if own or role is not Role.USER else 404


def tenant_scoped(role: Role, own: bool) -> int:
    return 201 if own or role is not Role.USER else 403


def operators(role: Role, own: bool) -> int:
    return 403 if role is Role.USER else 200


def admins(role: Role, own: bool) -> int:
    return 200 if role is Role.ADMIN else 403


def anyone(role: Role, own: bool) -> int:
    return 200


def _drain_then_online_gpu(w: World, h: dict[str, str], _: str) -> int:
    r = w.rest.post("/v1/gpus/node-0/0/drain", json={"reason": "matrix"}, headers=h)
    if r.status_code == 200:
        assert w.rest.post("/v1/gpus/node-0/0/online", headers=h).status_code == 200
    return r.status_code


def _grpc_drain_then_online_gpu(w: World, md: Any, _: str) -> Any:
    w.admin.GpuAction(pb.GpuActionRequest(node="node-0", index=0, action="drain"), metadata=md)
    return w.admin.GpuAction(
        pb.GpuActionRequest(node="node-0", index=0, action="online"), metadata=md
    )


def _drain_then_online_node(w: World, h: dict[str, str], _: str) -> int:
    r = w.rest.post("/v1/nodes/node-0/drain", json={"reason": "matrix"}, headers=h)
    if r.status_code == 200:
        assert w.rest.post("/v1/nodes/node-0/online", headers=h).status_code == 200
    return r.status_code


def _grpc_drain_then_online_node(w: World, md: Any, _: str) -> Any:
    w.admin.NodeAction(pb.NodeActionRequest(node="node-0", action="drain"), metadata=md)
    return w.admin.NodeAction(pb.NodeActionRequest(node="node-0", action="online"), metadata=md)


@dataclass(frozen=True)
class Case:
    name: str
    expect: Expect
    rest: Rest
    grpc: Grpc | None  # None: REST only (no such RPC)


CASES = [
    Case(
        "get job",
        job_scoped,
        lambda w, h, t: w.rest.get(f"/v1/jobs/{w.job(t)}", headers=h).status_code,
        lambda w, md, t: w.jobs.GetJob(pb.GetJobRequest(id=w.job(t)), metadata=md),
    ),
    Case(
        "cancel job",
        job_scoped,
        lambda w, h, t: w.rest.post(f"/v1/jobs/{w.job(t)}/cancel", headers=h).status_code,
        lambda w, md, t: w.jobs.CancelJob(pb.CancelJobRequest(id=w.job(t)), metadata=md),
    ),
    Case(
        "kill job",
        job_scoped,
        lambda w, h, t: w.rest.post(f"/v1/jobs/{w.job(t)}/kill", headers=h).status_code,
        lambda w, md, t: w.jobs.KillJob(pb.KillJobRequest(id=w.job(t)), metadata=md),
    ),
    Case(
        "job logs",
        job_scoped,
        lambda w, h, t: w.rest.get(f"/v1/jobs/{w.job(t)}/logs", headers=h).status_code,
        lambda w, md, t: w.jobs.GetLogs(pb.GetLogsRequest(id=w.job(t)), metadata=md),
    ),
    Case(
        "submit into a tenant",
        tenant_scoped,
        lambda w, h, t: (
            w.rest.post(
                "/v1/jobs", json={"command": ["fake-forever"], "tenant": t}, headers=h
            ).status_code
        ),
        lambda w, md, t: w.jobs.SubmitJob(
            pb.SubmitJobRequest(command=["fake-forever"], tenant=t), metadata=md
        ),
    ),
    Case(
        "list jobs",
        anyone,
        lambda w, h, t: w.rest.get("/v1/jobs", params={"tenant": t}, headers=h).status_code,
        lambda w, md, t: w.jobs.ListJobs(pb.ListJobsRequest(tenant=t), metadata=md),
    ),
    Case(
        "list gpus",
        anyone,
        lambda w, h, t: w.rest.get("/v1/gpus", headers=h).status_code,
        lambda w, md, t: w.cluster.ListGpus(pb.ListGpusRequest(), metadata=md),
    ),
    Case(
        "cluster status",
        anyone,
        lambda w, h, t: w.rest.get("/v1/status", headers=h).status_code,
        lambda w, md, t: w.cluster.GetStatus(pb.GetStatusRequest(), metadata=md),
    ),
    Case(
        "list nodes",
        anyone,
        lambda w, h, t: w.rest.get("/v1/nodes", headers=h).status_code,
        lambda w, md, t: w.admin.ListNodes(pb.ListNodesRequest(), metadata=md),
    ),
    Case("drain/online a gpu", operators, _drain_then_online_gpu, _grpc_drain_then_online_gpu),
    Case("drain/online a node", operators, _drain_then_online_node, _grpc_drain_then_online_node),
    Case(
        "inject a fault",
        operators,
        lambda w, h, t: (
            w.rest.post(
                "/v1/debug/inject", json={"script": "temp 40 on gpu 7"}, headers=h
            ).status_code
        ),
        None,
    ),
    Case(
        "read the audit log",
        operators,
        lambda w, h, t: w.rest.get("/v1/audit", headers=h).status_code,
        lambda w, md, t: w.admin.ListAudit(pb.AuditRequest(limit=5), metadata=md),
    ),
    Case(
        "usage of a tenant",
        lambda role, own: 200 if own or role is not Role.USER else 403,
        lambda w, h, t: w.rest.get("/v1/usage", params={"tenant": t}, headers=h).status_code,
        None,
    ),
    Case(
        "list tenants",
        admins,
        lambda w, h, t: w.rest.get("/v1/tenants", headers=h).status_code,
        lambda w, md, t: w.admin.ListTenants(pb.ListTenantsRequest(), metadata=md),
    ),
    Case(
        "create a tenant",
        lambda role, own: 201 if role is Role.ADMIN else 403,
        lambda w, h, t: w.rest.post("/v1/tenants", json={"name": "c"}, headers=h).status_code,
        lambda w, md, t: w.admin.CreateTenant(pb.CreateTenantRequest(name="c"), metadata=md),
    ),
    Case(
        "list tokens",
        admins,
        lambda w, h, t: w.rest.get("/v1/tokens", headers=h).status_code,
        lambda w, md, t: w.admin.ListTokens(pb.ListTokensRequest(), metadata=md),
    ),
    Case(
        "create a token",
        lambda role, own: 201 if role is Role.ADMIN else 403,
        lambda w, h, t: (
            w.rest.post(
                "/v1/tokens", json={"name": "n", "tenant": t, "role": "user"}, headers=h
            ).status_code
        ),
        lambda w, md, t: w.admin.CreateToken(
            pb.CreateTokenRequest(name="n", tenant=t, role="user"), metadata=md
        ),
    ),
    Case(
        "revoke a token",
        admins,
        lambda w, h, t: w.rest.delete(f"/v1/tokens/{w.spare_token()}", headers=h).status_code,
        lambda w, md, t: w.admin.RevokeToken(
            pb.RevokeTokenRequest(token_id=w.spare_token()), metadata=md
        ),
    ),
    Case(
        "who am i",
        anyone,
        lambda w, h, t: w.rest.get("/v1/whoami", headers=h).status_code,
        None,
    ),
]


def _grpc_status(call: Callable[[], Any]) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return OK


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("role", ROLES, ids=str)
@pytest.mark.parametrize("own", [True, False], ids=["own-tenant", "other-tenant"])
def test_each_role_gets_what_the_matrix_says_over_rest_and_grpc(
    world: World, case: Case, role: Role, own: bool
) -> None:
    tenant = "a" if own else "b"
    expected = case.expect(role, own)
    secret = world.secrets[role]
    got = case.rest(world, {"Authorization": f"Bearer {secret}"}, tenant)
    assert got == expected, (case.name, role, tenant)
    if case.grpc is not None:
        grpc_case = case.grpc
        md = (("authorization", f"Bearer {secret}"),)
        code = _grpc_status(lambda: grpc_case(world, md, tenant))
        assert code == GRPC_OF[expected], (case.name, role, tenant, code)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_without_a_valid_token_every_endpoint_is_unauthenticated(world: World, case: Case) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic eDp5"}):
        assert case.rest(world, headers, "a") == 401, (case.name, headers)
    if case.grpc is not None:
        grpc_case = case.grpc
        for md in ((), (("authorization", "Bearer nope"),)):
            code = _grpc_status(lambda md=md: grpc_case(world, md, "a"))  # type: ignore[misc]
            assert code == grpc.StatusCode.UNAUTHENTICATED, (case.name, md)


def test_a_user_lists_only_its_own_tenants_jobs_over_both_apis(world: World) -> None:
    mine, theirs = world.job("a"), world.job("b")
    h = {"Authorization": f"Bearer {world.secrets[Role.USER]}"}
    ids = {j["id"] for j in world.rest.get("/v1/jobs", headers=h).json()}
    assert mine in ids and theirs not in ids
    md = (("authorization", f"Bearer {world.secrets[Role.USER]}"),)
    listed = {j.id for j in world.jobs.ListJobs(pb.ListJobsRequest(), metadata=md).jobs}
    assert listed == ids
    op = {"Authorization": f"Bearer {world.secrets[Role.OPERATOR]}"}
    assert {mine, theirs} <= {j["id"] for j in world.rest.get("/v1/jobs", headers=op).json()}


def test_a_job_submitted_without_a_tenant_lands_in_the_callers_tenant(world: World) -> None:
    h = {"Authorization": f"Bearer {world.secrets[Role.USER]}"}
    r = world.rest.post("/v1/jobs", json={"command": ["fake-forever"]}, headers=h)
    assert r.status_code == 201 and r.json()["tenant"] == "a"
    md = (("authorization", f"Bearer {world.secrets[Role.USER]}"),)
    job = world.jobs.SubmitJob(pb.SubmitJobRequest(command=["fake-forever"]), metadata=md)
    assert job.tenant == "a"


def test_a_revoked_token_is_refused_at_once(world: World) -> None:
    access = world.container.access()
    issued = access.create_token(world.root, "short-lived", "a", Role.USER)
    h = {"Authorization": f"Bearer {issued.secret}"}
    assert world.rest.get("/v1/whoami", headers=h).json()["name"] == "short-lived"
    access.revoke_token(world.root, issued.info.token_id)
    r = world.rest.get("/v1/whoami", headers=h)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert r.headers["content-type"] == "application/problem+json"


def test_the_audit_chain_records_who_did_what_including_refusals(world: World) -> None:
    user = {"Authorization": f"Bearer {world.secrets[Role.USER]}"}
    job = world.job("a")
    assert world.rest.post(f"/v1/jobs/{job}/cancel", headers=user).status_code == 200
    assert world.rest.post("/v1/nodes/node-0/drain", headers=user).status_code == 403
    entries = world.container.adapters.audit_log().tail(50)
    assert any(
        e["action"] == "job.cancel" and e["target"] == f"job {job}" and e["actor"] == "user-of-a"
        for e in entries
    )
    assert any(
        e["action"] == "hardware.action" and e["outcome"].startswith("refused") for e in entries
    )
    assert all(b["prev"] == a["hash"] for a, b in itertools.pairwise(entries))


def test_a_user_watching_jobs_sees_only_its_own_tenants_events(world: World) -> None:
    md = (("authorization", f"Bearer {world.secrets[Role.USER]}"),)
    stream = world.jobs.WatchJobs(pb.WatchJobsRequest(), metadata=md, timeout=30)
    seen: list[pb.JobEvent] = []
    done = threading.Event()

    def collect() -> None:
        try:
            for event in stream:
                seen.append(event)
                if event.job.tenant == "a":
                    done.set()
        except grpc.RpcError:
            pass  # cancelled below, or the deadline
        done.set()

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    for _ in range(100):  # until the subscription is surely live: an own-tenant event arrives
        world.job("b")
        world.job("a")
        if done.wait(0.2):
            break
    stream.cancel()
    reader.join(timeout=10)
    assert seen and {e.job.tenant for e in seen} == {"a"}


def test_a_user_does_not_learn_other_tenants_job_ids_from_the_gpu_list(world: World) -> None:
    spec = JobSpec(command=("fake-forever",), tenant="b", gpus=1)
    theirs = world.container.jobs_api().submit(spec).id
    op = {"Authorization": f"Bearer {world.secrets[Role.OPERATOR]}"}
    for _ in range(500):  # until it holds a GPU
        if any(g["job_id"] == theirs for g in world.rest.get("/v1/gpus", headers=op).json()):
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the job never got a GPU")
    user = {"Authorization": f"Bearer {world.secrets[Role.USER]}"}
    assert theirs not in {g["job_id"] for g in world.rest.get("/v1/gpus", headers=user).json()}
    md = (("authorization", f"Bearer {world.secrets[Role.USER]}"),)
    listed = world.cluster.ListGpus(pb.ListGpusRequest(), metadata=md).gpus
    assert theirs not in {g.job_id for g in listed}
    world.container.jobs_api().kill(theirs)
