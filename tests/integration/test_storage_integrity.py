"""Issue 20.6 against a real `serve`: damaged storage is refused in one line, never served.

One server (auth on: tenants and token digests are replicated state, in raft.db) takes three jobs and is killed
(SIGKILL: its SQLite WAL files stay, as after a crash); each test damages a copy of that data
dir the way the audit did and starts `serve` on it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import CGROUP_ROOT, instance_of
from tests.integration.conftest import ENTRY, Server, wait_for

JOBS = 3


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A data dir whose server acknowledged JOBS submits (`flipme` asks for 1 GPU), then died."""
    base = tmp_path_factory.mktemp("crashed")
    server = Server(base / "data", {"GPU_PLATFORM_AUTH": "on"}).start()
    try:
        token = (server.data_dir / "admin-token").read_text().strip()
        server.env["GPU_PLATFORM_TOKEN"] = token
        ids: list[str] = []
        for i in range(JOBS):
            name = "flipme" if i == 0 else f"job-{i}"
            r = server.cli("submit", "-q", "--gpus", "1", "--name", name, "--", "true")
            assert r.returncode == 0, r.stderr
            ids.append(r.stdout.strip())
        # ended, so the kill leaves no job (or cgroup) behind
        assert wait_for(lambda: all(state(server, token, j) == "COMPLETED" for j in ids))
    finally:
        server.stop(signal.SIGKILL)
        # its jobs ended, so only the data dir's own (empty) cgroup is left, which a restart on
        # this dir would sweep; the tests start on copies, so remove it here
        for group in CGROUP_ROOT.glob(f"*/gpu-platform/{instance_of(server.data_dir)}"):
            group.rmdir()
    assert (
        server.data_dir / "raft.db-wal"
    ).stat().st_size > 0  # the acknowledged writes live there
    yield server.data_dir


def state(server: Server, token: str, job_id: str) -> str:
    headers = {"Authorization": f"Bearer {token}"}
    job = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers=headers, timeout=10).json()
    return str(job.get("state"))


def copy_of(crashed: Path, into: Path) -> Path:
    data = into / "data"
    shutil.copytree(crashed, data)
    (data / "lock").unlink()
    return data


def flip_the_gpu_count(data: Path) -> None:
    """The audit's flip: `flipme`'s `"gpus":1` becomes `"gpus":3` inside its log entry."""
    with sqlite3.connect(data / "raft.db") as db:  # fold the WAL into the file to edit it
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = bytearray((data / "raft.db").read_bytes())
    at = raw.find(b'"gpus":1', 0, raw.find(b'"name":"flipme"')) + len(b'"gpus":')
    assert at > 6 and raw[at] == ord("1")
    raw[at] ^= 0b10
    (data / "raft.db").write_bytes(raw)


def delete_the_wal(data: Path) -> None:
    (data / "raft.db-wal").unlink()


def delete_raft_db(data: Path) -> None:
    for name in ("raft.db", "raft.db-wal", "raft.db-shm"):
        (data / name).unlink(missing_ok=True)


def empty_state_db(data: Path) -> None:
    for name in ("state.db-wal", "state.db-shm"):
        (data / name).unlink(missing_ok=True)
    os.truncate(data / "state.db", 0)


DAMAGE = {f.__name__: f for f in (flip_the_gpu_count, delete_the_wal, delete_raft_db)}


@pytest.fixture(scope="module")
def refusals(crashed: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """`serve` on a copy of `crashed` with each DAMAGE done (all started at once): its exit
    status and stderr."""
    procs = {}
    for name, damage in DAMAGE.items():
        data = copy_of(crashed, tmp_path_factory.mktemp(name))
        damage(data)
        server = Server(data, {"GPU_PLATFORM_AUTH": "on"})
        procs[name] = subprocess.Popen(
            [*ENTRY, "serve", "--port", str(server.port), "--data-dir", str(data)],
            env=server.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    results = {}
    for name, proc in procs.items():
        try:
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        results[name] = (proc.returncode, err)
    return results


def refusal(refusals: dict[str, tuple[int, str]], damage: str) -> str:
    """The one line a refused start printed (exit status 1, no traceback)."""
    rc, err = refusals[damage]
    assert rc == 1, err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ")
    return err.strip()


def test_the_crashed_data_dir_itself_starts_with_every_acknowledged_job(
    crashed: Path, tmp_path: Path
) -> None:
    data = copy_of(crashed, tmp_path)
    server = Server(data, {"GPU_PLATFORM_AUTH": "on"}).start()
    try:
        token = (data / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        jobs = httpx.get(f"{server.url}/v1/jobs", headers=headers, timeout=10).json()
        assert len(jobs["items"] if isinstance(jobs, dict) else jobs) == JOBS
    finally:
        assert server.stop() == 0


def test_a_flipped_bit_in_a_stored_entry_is_refused_naming_the_entry(
    refusals: dict[str, tuple[int, str]],
) -> None:
    line = refusal(refusals, "flip_the_gpu_count")
    assert "raft.db is corrupt: log entry" in line and "fails its checksum" in line
    assert "backup" in line and "--join" in line


def test_a_deleted_wal_is_refused_rather_than_losing_acknowledged_jobs(
    refusals: dict[str, tuple[int, str]],
) -> None:
    line = refusal(refusals, "delete_the_wal")
    assert "raft.db has lost data" in line and "raft.mark" in line


def test_a_deleted_raft_db_is_refused_with_how_to_rejoin_as_a_new_member(
    refusals: dict[str, tuple[int, str]],
) -> None:
    line = refusal(refusals, "delete_raft_db")
    assert "raft.db has lost data: it holds term 0, commit 0, last index 0" in line
    assert "member 1, cluster c-" in line
    assert "serve --id NEW_ID" in line and "cluster add-server NEW_ID" in line


def test_an_emptied_state_db_loses_no_tenant_token_or_job(crashed: Path, tmp_path: Path) -> None:
    """The audit's emptied state.db wiped tenants and tokens; they now live in the replicated
    log, so the server starts with all of them (a state.db that did hold writes and is found
    emptied is refused: tests/unit/adapters/test_storage_integrity.py)."""
    data = copy_of(crashed, tmp_path)
    empty_state_db(data)
    server = Server(data, {"GPU_PLATFORM_AUTH": "on"}).start()
    try:
        token = (data / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        jobs = httpx.get(f"{server.url}/v1/jobs", headers=headers, timeout=10)
        assert jobs.status_code == 200, jobs.text
        body = jobs.json()
        assert len(body["items"] if isinstance(body, dict) else body) == JOBS
        tenants = httpx.get(f"{server.url}/v1/tenants", headers=headers, timeout=10)
        assert tenants.status_code == 200 and "default" in tenants.text
    finally:
        assert server.stop() == 0
