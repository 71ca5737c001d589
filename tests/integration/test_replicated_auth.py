"""Issue 20.4 end to end: tenants, tokens and revocations are replicated through the Raft log.

Three real `serve --id/--peers` servers with authentication on (no agents: only the API and
the log matter here). Each server's data dir starts with an old `state.db` holding a token of
the pre-replication store, which the first leader imports. Before the fix a token created on
the leader was unknown (401) on the followers and after a failover, and a revocation stayed on
the server that made it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.storage import SqliteAccessStore
from gpu_platform.application.auth import digest_of
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.ports.outbound.access_store import TokenRecord
from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until

WAIT = 90.0
LEGACY_SECRET = "legacy-secret-of-the-old-store-0123456789"
pytestmark = pytest.mark.timeout(300)


def _seed_legacy(data: Path) -> None:
    """An old single-server data dir: a tenant and a user token in state.db."""
    data.mkdir(parents=True, exist_ok=True)
    store = SqliteAccessStore(data / "state.db")
    store.add_tenant("legacy", 5.0)
    digest = digest_of(LEGACY_SECRET)
    store.add_token(TokenRecord(f"tok_{digest[:12]}", digest, "old-ci", "legacy", Role.USER, 6.0))
    store.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicatedCluster]:
    root = tmp_path_factory.mktemp("auth-cluster")
    c = ReplicatedCluster(
        root,
        servers=3,
        agents=0,
        env={"GPU_PLATFORM_AUTH": "on", "GPU_PLATFORM_AUTH_FAILURES_PER_MINUTE": "0"},
    )
    for i in c.ids:
        _seed_legacy(root / f"server-{i}")
    c.start()
    try:
        files = [root / f"server-{i}" / "admin-token" for i in c.ids]
        assert wait_until(lambda: any(f.exists() and f.read_text().strip() for f in files), WAIT)
        written = [f for f in files if f.exists()]
        assert len(written) == 1, "exactly one server bootstraps the cluster's admin token"
        c.client.headers["Authorization"] = "Bearer " + written[0].read_text().strip()
        c.wait_leader(timeout=WAIT)
        yield c
    finally:
        c.close()


def _whoami(c: ReplicatedCluster, i: int, secret: str) -> int:
    r = httpx.get(
        c.url(i) + "/v1/whoami", headers={"Authorization": f"Bearer {secret}"}, timeout=10
    )
    return r.status_code


def _everywhere(c: ReplicatedCluster, secret: str, status: int) -> bool:
    return all(_whoami(c, i, secret) == status for i in c.alive())


def _create_token(c: ReplicatedCluster, name: str, tenant: str, role: str) -> dict[str, Any]:
    r = c.client.post(
        c.any_url() + "/v1/tokens", json={"name": name, "tenant": tenant, "role": role}
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def test_tokens_work_on_every_server_survive_failover_and_revocations_reach_all(
    cluster: ReplicatedCluster,
) -> None:
    c = cluster
    lead = c.wait_leader(timeout=WAIT)
    followers = [i for i in c.alive() if i != lead]
    assert c.client.post(c.url(lead) + "/v1/tenants", json={"name": "team-a"}).status_code == 201
    user = _create_token(c, "alice", "team-a", "user")
    spare = _create_token(c, "bob", "team-a", "user")

    # a token made on the leader authenticates on every follower (from its own replica)
    assert wait_until(lambda: _everywhere(c, user["token"], 200), WAIT)
    stale = httpx.get(
        c.url(followers[0]) + "/v1/jobs",
        headers={"Authorization": f"Bearer {user['token']}", "X-Read-Consistency": "stale"},
        timeout=10,
    )
    assert stale.status_code == 200, stale.text
    # gRPC too: a follower knows the user (PERMISSION_DENIED, not UNAUTHENTICATED) and sends
    # an admin's write to the leader
    admin_md = (("authorization", c.client.headers["Authorization"]),)
    with grpc.insecure_channel(f"127.0.0.1:{c.grpc[followers[1]]}") as channel:
        stub = pb_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as denied:
            stub.ListTokens(
                pb.ListTokensRequest(), metadata=(("authorization", f"Bearer {spare['token']}"),)
            )
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as moved:
            stub.CreateTenant(pb.CreateTenantRequest(name="team-b"), metadata=admin_md)
        assert moved.value.code() is grpc.StatusCode.UNAVAILABLE
    # the old store's token was imported once by the leader and works everywhere too
    assert wait_until(lambda: _everywhere(c, LEGACY_SECRET, 200), WAIT)

    # a revocation sent to a follower reaches the leader (307) and then every server
    path = f"/v1/tokens/{user['token_id']}"
    sent = c.client.delete(c.url(followers[0]) + path, follow_redirects=False)
    assert sent.status_code == 307 and sent.headers["location"] == c.url(lead) + path
    assert c.client.delete(sent.headers["location"]).status_code == 200
    assert wait_until(lambda: _everywhere(c, user["token"], 401), WAIT)

    # the last live admin token cannot be revoked, on any server (CLI: one line, non-zero)
    admins = [t for t in c.client.get(c.any_url() + "/v1/tokens").json() if t["role"] == "admin"]
    assert len(admins) == 1
    secret = c.client.headers["Authorization"].removeprefix("Bearer ")
    done = c.cli("--token", secret, "tokens", "revoke", admins[0]["token_id"], "--server",
                 c.any_url())  # fmt: skip
    assert done.returncode != 0
    assert "last live admin token" in done.stderr and len(done.stderr.strip().splitlines()) == 1

    # secrets never reach a disk: only digests are replicated and stored
    for path in c.root.rglob("*"):
        if path.is_file() and path.name != "admin-token" and not path.name.endswith(".log"):
            data = path.read_bytes()
            for token in (user, spare):
                assert token["token"].encode() not in data, f"secret found in {path}"
    raft_files = b"".join(p.read_bytes() for p in c.root.rglob("raft.db*") if p.is_file())
    assert digest_of(spare["token"]).encode() in raft_files  # what is stored instead

    # failover: kill the leader; the tokens still authenticate on the survivors
    c.kill_server(lead, signal.SIGKILL)
    new_lead = c.wait_leader(timeout=WAIT)
    assert new_lead != lead
    assert wait_until(lambda: _everywhere(c, spare["token"], 200), WAIT)
    assert _everywhere(c, user["token"], 401)
    assert c.client.get(c.url(new_lead) + "/v1/tokens").status_code == 200  # the admin too
    fresh = _create_token(c, "carol", "team-a", "user")
    assert wait_until(lambda: _everywhere(c, fresh["token"], 200), WAIT)
