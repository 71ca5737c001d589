"""MIG jobs over real HTTP and the real CLI against a real server (simulated A100-SXM4-80GB
node, no MIG controller configured): bad MIG requests are refused at submit naming the field,
and a good one is kept, shown, and fails at launch saying why rather than run on a whole GPU."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.integration.conftest import Server


def test_mig_requests_are_checked_at_submit_and_never_run_without_a_mig_controller(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    r = httpx.post(
        f"{server.url}/v1/jobs",
        json={"command": ["true"], "gpus": 1, "mig_profile": "1g.7gb"},
        timeout=10,
    )
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["errors"]] == ["mig_profile"], r.text

    cases = [  # (argv, what stderr says); 6 = the server refused the request (docs/cli.md)
        (("submit", "--mig", "1g.7gb", "--", "true"), "unknown MIG profile '1g.7gb'"),
        (("submit", "--mig", "1g.10gb", "--gpus", "2", "--", "true"), "gpus must be 1"),
        (("submit", "--mig", "1g.5gb", "--", "true"), "could never be placed"),
    ]
    for args, needle in cases:
        got = server.cli(*args)
        assert got.returncode == 6, (args, got)
        assert "mig_profile" in got.stderr and needle in got.stderr, (args, got.stderr)
        assert len(got.stderr.strip().splitlines()) == 1, (args, got.stderr)

    ok = server.cli("submit", "-q", "--mig", "1g.10gb", "--", "true")
    assert ok.returncode == 0, ok.stderr
    job_id = ok.stdout.strip()
    job = server.wait_job(job_id, lambda j: j["state"] == "FAILED")
    assert job["mig_profile"] == "1g.10gb" and job["gpus"] == 1
    assert "no MIG instance was assigned" in job["reason"] and "mig_controller" in job["reason"]
    described = server.cli("jobs", "describe", job_id)
    assert "GPUs requested: 1 (one MIG 1g.10gb instance)" in described.stdout.splitlines()
