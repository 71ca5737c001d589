"""A user-role tenant's job attacks a real `gpu-platform serve` with authentication on and the
product's job defaults (job_user nobody, a PID namespace per task): it tries to read the admin
token file and the data directory, another tenant's running job's /proc/PID/environ, and to
mint an admin token with whatever it found. Everything is refused and no token is minted. A
submit naming root (or any account not granted) is refused naming the field `user`."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.adapters.outbound.process.accounts import pid_namespaces_work
from gpu_platform.testing.system import require
from tests.integration.conftest import Server, wait_for

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="jobs switch accounts only under root"),
]

SECRET = "victim-wandb-secret"
ATTACK = r"""
import json, os, sys, urllib.request
url, data, hosts, victim = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
found = []
for name in ("admin-token", "cluster-token", "state.db", "raft.db", "audit.jsonl"):
    try:
        with open(os.path.join(data, name), "rb") as f:
            found.append(f.read().decode(errors="replace").strip())
        print("READ", name)
    except OSError as exc:
        print("DENIED", name, exc.strerror)
try:
    print("LISTED", os.listdir(data))
except OSError as exc:
    print("DENIED-LIST", exc.strerror)
try:  # from its own log directory up to the other jobs' (not through the data dir)
    print("LISTED-JOBS", os.listdir(".."))
except OSError as exc:
    print("DENIED-JOBS", exc.strerror)
try:
    with open(f"../{victim}/attempt-1.log", "rb") as f:
        print("READ-LOG", f.read()[:20])
except OSError as exc:
    print("DENIED-LOG", exc.strerror)
pids = {int(p) for p in os.listdir("/proc") if p.isdigit()} | set(hosts)
for pid in sorted(pids):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if b"SECRET_MARK" in f.read():
                print("LEAKED", pid)
    except OSError:
        pass
for token in found[:1] or ["none"]:
    req = urllib.request.Request(
        url + "/v1/tokens", method="POST",
        data=json.dumps({"name": "pwned", "tenant": "default", "role": "admin"}).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        print("MINTED", urllib.request.urlopen(req, timeout=10).status)
    except urllib.error.HTTPError as exc:
        print("REFUSED", exc.code)
if any("CLUSTER_TOKEN" in k or "gpc_attack" in v for k, v in os.environ.items()):
    print("ENV-LEAK")
print("DONE")
""".replace("SECRET_MARK", SECRET)


def world_python() -> str:
    """A Python interpreter any account may run (the test's own may lie under /root)."""
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(path, os.X_OK) and os.stat(path).st_mode & 0o001:
            return path
    pytest.skip("no world-executable python3 for the job")


def host_pids(job_id: str) -> list[int]:
    """Host pids of the processes of a job (by its marker; the test runs as root)."""
    needle = f"GPU_PLATFORM_JOB_ID={job_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def wait_state(server: Server, token: str, job_id: str, *states: str) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def check() -> bool:
        nonlocal last
        headers = {"Authorization": f"Bearer {token}"}
        last = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers=headers, timeout=10).json()
        return last.get("state") in states

    assert wait_for(check, timeout=60), f"job never reached {states}: {last}"
    return last


def as_(server: Server, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return server.cli("--token", token, *args)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require(pid_namespaces_work(), "jobs cannot get their own PID namespace here")
    root = tmp_path_factory.mktemp("attacks")

    server = Server(
        root / "data",
        {
            "GPU_PLATFORM_AUTH": "on",
            "GPU_PLATFORM_CLUSTER_TOKEN": "gpc_attack_test_secret",  # jobs never inherit it
            "GPU_PLATFORM_ISOLATION": "none",
            "GPU_PLATFORM_JOB_USER": "nobody",  # the product's defaults (tests/conftest.py
            "GPU_PLATFORM_JOB_PID_NAMESPACE": "true",  # keeps other tests' jobs as root)
        },
    ).start()
    yield server
    server.stop()


def api(server: Server, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.request(method, f"{server.url}{path}", headers=headers, timeout=15, **kw)


def token_for(server: Server, admin: str, tenant: str) -> str:
    assert api(server, admin, "POST", "/v1/tenants", json={"name": tenant}).status_code == 201
    body = {"name": f"u-{tenant}", "tenant": tenant, "role": "user"}
    r = api(server, admin, "POST", "/v1/tokens", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def submit(server: Server, token: str, **body: Any) -> httpx.Response:
    return api(server, token, "POST", "/v1/jobs", json=body)


def tokens(server: Server, admin: str) -> set[str]:
    return {t["token_id"] for t in api(server, admin, "GET", "/v1/tokens").json()}


def logs(server: Server, token: str, job_id: str) -> str:
    return api(server, token, "GET", f"/v1/jobs/{job_id}/logs").text


def test_a_user_job_cannot_read_secrets_or_other_jobs_and_mints_no_token(
    secured: Server,
) -> None:
    server = secured
    data = server.data_dir
    admin = (data / "admin-token").read_text().strip()
    victim, mallory = token_for(server, admin, "victim"), token_for(server, admin, "acme")
    r = submit(server, victim, command=["sleep", "120"], env={"WANDB_API_KEY": SECRET})
    assert r.status_code == 201, r.text
    victim_job = r.json()["id"]
    wait_state(server, victim, victim_job, "RUNNING")
    assert wait_for(lambda: bool(host_pids(victim_job)))
    before = tokens(server, admin)
    hosts = json.dumps(host_pids(victim_job))
    argv = [world_python(), "-c", ATTACK, server.url, str(data), hosts, victim_job]
    r = submit(server, mallory, command=argv)
    assert r.status_code == 201, r.text
    job = wait_state(server, mallory, r.json()["id"], "COMPLETED", "FAILED")
    out = logs(server, mallory, job["id"])
    assert "DONE" in out, out
    assert "DENIED admin-token Permission denied" in out
    assert "DENIED-LIST Permission denied" in out
    assert "DENIED-JOBS Permission denied" in out and "DENIED-LOG Permission denied" in out
    assert "READ" not in out and "LISTED" not in out and "LEAKED" not in out
    assert "ENV-LEAK" not in out  # the server's own secrets are not in the job's environment
    assert "MINTED" not in out and "REFUSED 401" in out
    assert tokens(server, admin) == before  # no token was minted
    assert api(server, admin, "POST", f"/v1/jobs/{victim_job}/kill").status_code == 200


def test_the_data_directory_and_its_secrets_are_private_to_the_server(secured: Server) -> None:
    data = secured.data_dir
    assert data.stat().st_mode & 0o777 == 0o700
    assert (data / "admin-token").stat().st_mode & 0o777 == 0o600


def test_a_job_naming_root_or_an_account_not_granted_is_refused_naming_user(
    secured: Server,
) -> None:
    server = secured
    admin = (server.data_dir / "admin-token").read_text().strip()
    mallory = token_for(server, admin, "acme2")
    r = as_(server, mallory, "submit", "--user", "root", "--", "true")
    assert r.returncode != 0 and "user" in r.stderr and "root" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    for who in (mallory, admin):  # even an admin may not run acme2's job as root
        r = submit(server, who, command=["true"], tenant="acme2", user="root")
        assert r.status_code == 422 and "user" in r.text, r.text
    assert submit(server, mallory, command=["true"], user="daemon").status_code == 422
    for cwd in (str(server.data_dir.resolve()), f"{server.data_dir.resolve()}/jobs", "tmp"):
        r = submit(server, mallory, command=["true"], cwd=cwd)
        assert r.status_code == 422 and "cwd" in r.text, r.text
    grant = "/v1/run-as/acme2"
    r = api(server, admin, "PUT", grant, json={"accounts": ["root"]})  # root needs allow_root
    assert r.status_code == 422 and "accounts" in r.text
    assert api(server, mallory, "PUT", grant, json={"accounts": ["daemon"]}).status_code == 403
    r = as_(server, admin, "run-as", "set", "acme2", "daemon")
    assert r.returncode == 0, r.stderr
    r = submit(server, mallory, command=["id", "-un"], user="daemon")
    assert r.status_code == 201, r.text
    job = wait_state(server, mallory, r.json()["id"], "COMPLETED")
    assert logs(server, mallory, job["id"]).strip() == "daemon"
    r = submit(server, mallory, command=["true"], user="root")
    assert r.status_code == 422 and "user" in r.text  # granting daemon does not grant root
    listed = api(server, admin, "GET", "/v1/run-as").json()
    assert {"tenant": "acme2", "accounts": ["daemon"], "allow_root": False} in listed
    assert api(server, admin, "DELETE", grant).status_code == 204
    assert submit(server, mallory, command=["true"], user="daemon").status_code == 422
