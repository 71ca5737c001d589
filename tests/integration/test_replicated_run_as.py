"""Issue 20.4 end to end: run-as grants are replicated through the Raft log.

Three real `serve --id/--peers` servers with authentication on (no agents: a job only has to be
admitted). Before the fix a grant lived in the state.db of the server that set it: a follower
refused a job naming a granted account (422 naming `user`) instead of sending it to the
leader, and after a failover the new leader refused it too.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import pytest

from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until

WAIT = 90.0
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicatedCluster]:
    c = ReplicatedCluster(
        tmp_path_factory.mktemp("run-as-cluster"),
        servers=3,
        agents=0,
        env={"GPU_PLATFORM_AUTH": "on", "GPU_PLATFORM_AUTH_FAILURES_PER_MINUTE": "0"},
    )
    c.start()
    try:
        files = [c.root / f"server-{i}" / "admin-token" for i in c.ids]
        assert wait_until(lambda: any(f.exists() and f.read_text().strip() for f in files), WAIT)
        secret = next(f for f in files if f.exists()).read_text().strip()
        c.client.headers["Authorization"] = "Bearer " + secret
        c.wait_leader(timeout=WAIT)
        assert wait_until(lambda: all(_serving(c, i) for i in c.ids), WAIT)  # followers too
        yield c
    finally:
        c.close()


def _serving(c: ReplicatedCluster, i: int) -> bool:
    try:
        return c.client.get(c.url(i) + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _job(user: str) -> dict[str, object]:
    return {"command": ["true"], "gpus": 0, "tenant": "team-a", "user": user}


def _submit(c: ReplicatedCluster, i: int, user: str) -> httpx.Response:
    """A job of tenant team-a naming `user`, sent to server `i` (redirects not followed)."""
    return c.client.post(c.url(i) + "/v1/jobs", json=_job(user), follow_redirects=False)


def _refused(r: httpx.Response) -> bool:
    """A 422 naming `user`: the run-as check said no."""
    return r.status_code == 422 and r.json()["field"] == "user"


def _granted(c: ReplicatedCluster, i: int) -> list[str]:
    grants = c.client.get(c.url(i) + "/v1/run-as").json()
    return [a for g in grants if g["tenant"] == "team-a" for a in g["accounts"]]


def test_a_grant_set_on_the_leader_admits_jobs_through_followers_and_after_failover(
    cluster: ReplicatedCluster,
) -> None:
    c = cluster
    lead = c.wait_leader(timeout=WAIT)
    follower = next(i for i in c.alive() if i != lead)
    assert c.client.post(c.url(lead) + "/v1/tenants", json={"name": "team-a"}).status_code == 201
    assert _refused(_submit(c, follower, "alice"))

    put = c.client.put(c.url(lead) + "/v1/run-as/team-a", json={"accounts": ["alice"]})
    assert put.status_code == 200, put.text
    # every server checks from its own replica: a follower now admits the job and sends it on
    assert wait_until(lambda: all(_granted(c, i) == ["alice"] for i in c.alive()), WAIT)
    sent = _submit(c, follower, "alice")
    assert sent.status_code == 307, sent.text
    landed = c.client.post(sent.headers["location"], json=_job("alice"))
    assert landed.status_code == 201, landed.text
    assert _refused(_submit(c, follower, "bob"))  # only what was granted

    # failover: the survivors still hold the grant; a change made now reaches them all
    c.kill_server(lead, signal.SIGKILL)
    new_lead = c.wait_leader(timeout=WAIT)
    assert new_lead != lead
    admitted = _submit(c, new_lead, "alice")
    assert admitted.status_code == 201, admitted.text
    assert c.client.delete(c.url(new_lead) + "/v1/run-as/team-a").status_code in (200, 204)
    other = next(i for i in c.alive() if i != new_lead)
    assert wait_until(lambda: _granted(c, other) == [], WAIT)
    assert _refused(_submit(c, other, "alice"))
