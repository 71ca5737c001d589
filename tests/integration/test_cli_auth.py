"""The CLI against a real `gpu-platform serve` with authentication on: the bootstrap admin
token (0600 file), tokens and tenants, roles at work, the seed's §9 commands with `-o json`,
documented exit codes, `audit verify` on the server's audit file (and its tamper detection),
and shell completion."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import ENTRY, Server

# Each test runs a dozen CLI processes against a real server; on a loaded 2-core machine that
# can pass the suite's 120 s default.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def secured(server_factory: Callable[..., Server]) -> tuple[Server, str]:
    server = server_factory(GPU_PLATFORM_AUTH="on", GPU_PLATFORM_FAULT_INJECTION="true")
    token_file = server.data_dir / "admin-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    return server, token_file.read_text().strip()


def as_(server: Server, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return server.cli("--token", token, *args)


def test_roles_through_the_cli_with_documented_exit_codes(secured: tuple[Server, str]) -> None:
    server, admin = secured
    assert server.cli("jobs", "list").returncode == 4  # no token: 401
    assert as_(server, admin, "tenants", "create", "team-a").returncode == 0
    r = as_(server, admin, "tokens", "create", "--name", "ann", "--tenant", "team-a", "-o", "json")
    assert r.returncode == 0, r.stderr
    ann = json.loads(r.stdout)
    assert ann["role"] == "user" and ann["token"]
    r = as_(server, ann["token"], "whoami", "-o", "json")
    assert json.loads(r.stdout) == {
        "name": "ann",
        "tenant": "team-a",
        "role": "user",
        "token_id": ann["token_id"],
        "auth": True,
    }
    r = as_(server, ann["token"], "submit", "-q", "--", "sleep", "30")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    r = as_(server, ann["token"], "drain", "--gpu-id", "node-0:0", "--reason", "x")
    assert r.returncode == 4 and "may not" in r.stderr  # users do not operate hardware
    r = as_(server, ann["token"], "jobs", "kill", job, "--wait", "-o", "json")
    assert r.returncode == 0, r.stderr
    killed = json.loads(r.stdout)
    assert killed["state"] == "CANCELLED" and killed["tenant"] == "team-a"
    r = as_(server, admin, "jobs", "kill", job)
    assert r.returncode == 1 and "HTTP 409" in r.stderr  # ended already: a conflict
    listed = json.loads(as_(server, admin, "tokens", "list", "-o", "json").stdout)
    assert ann["token_id"] in {t["token_id"] for t in listed}
    assert all("token" not in t for t in listed)  # secrets are never listed
    assert as_(server, admin, "tokens", "revoke", ann["token_id"]).returncode == 0
    assert as_(server, ann["token"], "jobs", "list").returncode == 4


def test_the_seed_section_9_commands_answer_tables_and_json(secured: tuple[Server, str]) -> None:
    server, admin = secured
    gpus = json.loads(as_(server, admin, "gpus", "-o", "json").stdout)
    uuid = gpus[3]["uuid"]
    r = as_(server, admin, "status", "--all")
    assert r.returncode == 0 and uuid in r.stdout and "GPUs:" in r.stdout
    r = as_(server, admin, "health", "--gpu-id", uuid, "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["gpu"]["index"] == 3
    r = as_(server, admin, "health", "--gpu-id", "GPU-nope")
    assert r.returncode == 5
    r = as_(server, admin, "watch", "--interval", "100ms", "--count", "2", "-o", "json")
    frames = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and len(frames) == 2 and len(frames[0]["gpus"]) == 8
    r = as_(server, admin, "drain", "--gpu-id", uuid, "--reason", "maintenance", "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "DRAINING", r.stderr
    r = as_(server, admin, "offline", "--gpu-id", uuid, "--force", "--reason", "swap")
    assert r.returncode == 0 and "OFFLINE" in r.stdout, r.stderr
    r = as_(server, admin, "online", "--gpu-id", uuid)
    assert r.returncode == 0, r.stderr
    for args in (("jobs", "list"), ("nodes",), ("audit",), ("tenants", "list")):
        r = as_(server, admin, *args, "-o", "json")
        assert r.returncode == 0 and isinstance(json.loads(r.stdout), list), (args, r.stderr)


def test_audit_verify_accepts_the_servers_log_and_names_the_first_tampered_line(
    secured: tuple[Server, str], tmp_path: Path
) -> None:
    server, admin = secured
    for i in range(3):
        as_(server, admin, "tenants", "create", f"t{i}")
    audit = server.data_dir / "audit.jsonl"
    r = server.cli("audit", "verify", "--file", str(audit))
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    lines = audit.read_text().splitlines(keepends=True)
    assert len(lines) >= 4
    copy = tmp_path / "copy.jsonl"
    head = audit.with_name("audit.jsonl.head").read_text()
    copy.with_name("copy.jsonl.head").write_text(head)

    def verdict(text: list[str]) -> subprocess.CompletedProcess[str]:
        copy.write_text("".join(text))
        return server.cli("audit", "verify", "--file", str(copy))

    edited = list(lines)
    edited[2] = edited[2].replace('"t1"', '"evil"').replace("tenant t1", "tenant evil")
    for tampered, line in (
        (edited, 3),
        (lines[:1] + lines[2:], 2),  # removed
        ([*lines[:2], lines[1], *lines[2:]], 3),  # a replayed line inserted
        ([lines[0], lines[2], lines[1], *lines[3:]], 2),  # reordered
        (lines[:-1], len(lines)),  # the newest line removed: only the head notices
    ):
        r = verdict(tampered)
        assert r.returncode == 8 and f"line {line}:" in r.stderr, (line, r.stderr)


def test_shell_completion_is_offered() -> None:
    r = subprocess.run(
        [*ENTRY, "--show-completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ, _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1"),
    )
    assert r.returncode == 0, r.stderr
    assert "complete" in r.stdout and "gpu-platform" in r.stdout
