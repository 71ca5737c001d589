"""The README tour over real HTTP against a real server process, plus crash and shutdown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import ENTRY, Server, wait_for

PRINT_MASK = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
SLEEPER = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.split(")")[1].split()[0] != "Z"


def submitted_id(result: object) -> str:
    out = result.stdout.strip()  # type: ignore[attr-defined]
    assert out.startswith("j-"), result
    return out


def test_submit_describe_then_a_crash_and_restart_keep_the_record(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    r = server.cli("submit", "-q", "--gpus", "2", "--", "python3", "-c", PRINT_MASK)
    assert r.returncode == 0, r.stderr
    job_id = submitted_id(r)
    done = server.wait_job(job_id, lambda j: j["state"] == "COMPLETED")
    described = server.cli("jobs", "describe", job_id)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert "State:          COMPLETED" in lines
    assert "GPU indices:    0,1" in lines
    assert lines[-1] == "0,1"  # the job's own output: its CUDA_VISIBLE_DEVICES
    listed = server.cli("jobs", "list")
    assert job_id in listed.stdout and "COMPLETED" in listed.stdout

    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    again = server_factory(server.data_dir)
    assert again.get(f"/v1/jobs/{job_id}") == done
    # the output comes from the node's agent, which may still be reconnecting
    assert wait_for(lambda: again.cli("jobs", "describe", job_id).stdout == described.stdout)


def test_a_running_job_dies_with_a_crashed_server_and_runs_again_after_restart(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    job_id = submitted_id(
        server.cli("submit", "-q", "--gpus", "8", "--", sys.executable, "-c", SLEEPER)
    )
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    log = server.data_dir / "jobs" / job_id / "attempt-1.log"
    assert wait_for(lambda: log.exists() and log.read_text().strip() != "")
    first_pid = int(log.read_text())

    server.stop(signal.SIGKILL)
    assert wait_for(lambda: not pid_alive(first_pid)), "the job outlived its control plane"

    again = server_factory(server.data_dir)
    job = again.wait_job(job_id, lambda j: j["state"] == "RUNNING" and j["attempt"] == 2)
    # the restarted server's own agent runs nothing: the attempt was lost with it
    assert "no longer runs it" in [h["reason"] for h in job["history"]][-3]
    log2 = server.data_dir / "jobs" / job_id / "attempt-2.log"
    assert wait_for(lambda: log2.exists() and log2.read_text().strip() != "")
    second_pid = int(log2.read_text())
    assert again.cli("jobs", "cancel", job_id).returncode == 0
    assert wait_for(lambda: not pid_alive(second_pid))
    again.wait_job(job_id, lambda j: j["state"] == "CANCELLED")
    assert wait_for(lambda: again.get("/v1/status")["gpus_free"] == 8)


def test_sigterm_stops_jobs_cleanly_and_requeues_them(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    job_id = submitted_id(
        server.cli("submit", "-q", "--gpus", "1", "--", sys.executable, "-c", SLEEPER)
    )
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    log = server.data_dir / "jobs" / job_id / "attempt-1.log"
    assert wait_for(lambda: log.exists() and log.read_text().strip() != "")
    pid = int(log.read_text())

    assert server.stop(signal.SIGTERM) == 0
    assert not pid_alive(pid)
    server_log = server.log.read_text()
    assert "shutting down" in server_log and '"stopped"' in server_log

    again = server_factory(server.data_dir)
    job = again.wait_job(job_id, lambda j: j["attempt"] == 2 and j["state"] == "RUNNING")
    assert any(h["reason"] == "control plane shut down" for h in job["history"])


def test_the_cli_says_what_is_wrong_in_one_line_and_exits_non_zero(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    server = server_factory()
    cases = [  # (argv, what stderr says, the documented exit code: docs/cli.md)
        (
            ("submit", "--gpus", "9", "--", "true"),
            "gpus: requests 9 GPUs but the largest node has 8",
            6,
        ),
        (("jobs", "describe", "j-nope"), "job 'j-nope' not found", 5),
        (("jobs", "cancel", "j-nope"), "not found", 5),
        (("submit", "--env", "NOEQUALS", "--", "true"), "expected KEY=VALUE", 2),
        (("jobs", "list", "--state", "sleeping"), "state", 6),
    ]
    for args, needle, code in cases:
        r = server.cli(*args)
        assert r.returncode == code, (args, r)
        assert needle in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)

    with socket.socket() as held:  # bound, never listening: nothing answers on it
        held.bind(("127.0.0.1", 0))
        unreachable = Server(tmp_path / "none")
        unreachable.url = f"http://127.0.0.1:{held.getsockname()[1]}"
        r = unreachable.cli("status")
    assert r.returncode == 3 and "cannot reach the server" in r.stderr


def test_status_announces_the_simulated_inventory(server_factory: Callable[..., Server]) -> None:
    server = server_factory()
    r = server.cli("status")
    assert r.returncode == 0
    assert "Inventory: sim:dgx-a100 (SIMULATED)" in r.stdout and "8 free / 8 total" in r.stdout
    assert "SIMULATED inventory" in server.log.read_text()


def test_a_second_server_on_the_same_data_dir_is_refused(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    second = Server(server.data_dir)
    r = second.cli("serve", "--port", str(second.port), "--data-dir", str(server.data_dir))
    assert r.returncode == 1
    assert f"in use by another server (pid {server.proc.pid})" in r.stderr  # type: ignore[union-attr]


def test_a_bad_config_file_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("port = 99999\n")
    r = Server(tmp_path).cli("serve", "--config", str(cfg))
    assert r.returncode == 1
    assert str(cfg) in r.stderr and "port" in r.stderr
    assert os.listdir(tmp_path) == ["bad.toml"]


def test_the_topology_command_shows_the_dgx2_matrix_and_this_host(tmp_path: Path) -> None:
    from gpu_platform.testing.system import require_shared

    xml = require_shared("topologies", "hwloc", "nvidiaDGX2.xml")
    cli = Server(tmp_path)
    r = cli.cli("topology", "--xml", str(xml))
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("GPU")]
    matrix = [row for row in rows if len(row) > 16 and row[0][3:].isdigit()]
    assert len(matrix) == 16 and all(row[1 + i] == "X" for i, row in enumerate(matrix))
    assert {c for row in matrix for c in row[1:17]} == {"X", "NV6"}
    here = cli.cli("topology")
    assert here.returncode == 0, here.stderr
    assert "real view" in here.stdout and "SIMULATED fallback node" in here.stdout
    bad = cli.cli("topology", "--xml", str(tmp_path / "missing.xml"))
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1


def test_jobs_logs_follow_prints_output_as_it_comes_and_ends_with_the_job(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.4)"
    job_id = submitted_id(server.cli("submit", "-q", "--", sys.executable, "-c", code))
    r = server.cli("jobs", "logs", "--follow", job_id)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "tick 0\ntick 1\ntick 2\n"
    assert server.get(f"/v1/jobs/{job_id}")["state"] == "COMPLETED"


def test_a_time_limited_job_fails_with_the_reason(server_factory: Callable[..., Server]) -> None:
    server = server_factory()
    job_id = submitted_id(server.cli("submit", "-q", "--time-limit", "0.5", "--", "sleep", "600"))
    job = server.wait_job(job_id, lambda j: j["state"] == "FAILED")
    assert job["reason"] == "time limit of 0.5s exceeded"


def test_serve_answers_grpc_beside_rest(server_factory: Callable[..., Server]) -> None:
    import grpc

    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc

    server = server_factory()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        jobs = pb_grpc.JobServiceStub(channel)
        job = jobs.SubmitJob(pb.SubmitJobRequest(command=["true"], gpus=1), timeout=10)
        done = server.wait_job(job.id, lambda j: j["state"] == "COMPLETED")
        assert jobs.GetJob(pb.GetJobRequest(id=job.id), timeout=10).state == done["state"]
        # the restart policy travels over gRPC as over REST
        retried = pb.SubmitJobRequest(command=["true"], max_attempts=5, retry_backoff_s=1.5)
        read = jobs.GetJob(pb.GetJobRequest(id=jobs.SubmitJob(retried, timeout=10).id), timeout=10)
        assert (read.max_attempts, read.retry_backoff_s) == (5, 1.5)
        assert server.get(f"/v1/jobs/{read.id}")["max_attempts"] == 5
        status = pb_grpc.ClusterServiceStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
        assert status.simulated and status.gpus_total == 8


def test_plain_serve_is_a_one_voter_raft_cluster_with_its_own_agent(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    cluster = server.get("/v1/cluster")
    assert cluster["mode"] == "replicated" and cluster["role"] == "leader"
    assert [(s["id"], s["voter"]) for s in cluster["servers"]] == [(1, True)]
    assert list(cluster["agents"]) == ["node-0"]  # the in-process agent, over loopback gRPC
    assert (server.data_dir / "raft.db").exists()


def test_sigterm_with_the_fail_policy_ends_running_jobs_failed(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory(GPU_PLATFORM_SHUTDOWN_POLICY="fail")
    job_id = submitted_id(
        server.cli("submit", "-q", "--gpus", "1", "--", sys.executable, "-c", SLEEPER)
    )
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    assert server.stop(signal.SIGTERM) == 0

    again = server_factory(server.data_dir)
    job = again.wait_job(job_id, lambda j: j["state"] == "FAILED")
    assert job["attempt"] == 1
    assert any(h["reason"] == "control plane shut down" for h in job["history"])
    assert again.get("/v1/status")["gpus_free"] == 8


# A job whose grandchild leaves its session: it outlives a crash of its agent's process.
ESCAPER = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "    time.sleep(600)\n"
    "time.sleep(600)\n"
)


def test_processes_left_by_a_crashed_server_are_reaped_when_it_comes_back(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    server = server_factory(GPU_PLATFORM_ISOLATION="none")  # no cgroup to sweep them
    marker = tmp_path / "escaped.pid"
    job_id = submitted_id(
        server.cli("submit", "-q", "--gpus", "1", "--", sys.executable, "-c", ESCAPER, str(marker))
    )
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    assert wait_for(lambda: marker.exists() and marker.read_text() != "")
    escaped = int(marker.read_text())
    server.stop(signal.SIGKILL)
    assert pid_alive(escaped)  # nothing killed it: it left the job's process group

    again = server_factory(server.data_dir, GPU_PLATFORM_ISOLATION="none")
    assert wait_for(lambda: not pid_alive(escaped)), "the leftover process was not reaped"
    again.wait_job(job_id, lambda j: j["attempt"] == 2 and j["state"] == "RUNNING")


def test_restarts_of_the_control_plane_do_not_use_up_a_one_attempt_budget(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    job_id = submitted_id(
        server.cli(
            "submit", "-q", "--gpus", "1", "--max-attempts", "1", "--",
            sys.executable, "-c", SLEEPER,
        )
    )  # fmt: skip
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    for attempt, how in ((2, signal.SIGTERM), (3, signal.SIGKILL), (4, signal.SIGKILL)):
        server.stop(how)
        server = server_factory(server.data_dir)
        server.wait_job(job_id, lambda j, a=attempt: j["state"] == "RUNNING" and j["attempt"] == a)
    job = server.get(f"/v1/jobs/{job_id}")
    assert (job["faults"], job["interruptions"]) == (0, 3)
    lines = server.cli("jobs", "describe", job_id).stdout.splitlines()
    assert "Attempt:        4" in lines
    assert "Faults:         0 of at most 1" in lines
    assert server.cli("jobs", "cancel", job_id).returncode == 0
    server.wait_job(job_id, lambda j: j["state"] == "CANCELLED")


@pytest.mark.parametrize("taken", ["raft", "grpc", "rest"])
def test_a_second_serve_on_a_taken_port_exits_with_one_line_naming_it(
    server_factory: Callable[..., Server], tmp_path: Path, taken: str
) -> None:
    """Issue 19 item 7: two servers never share a port (gRPC's SO_REUSEPORT is off)."""
    first = server_factory()
    ports = {"rest": first.port, "grpc": first.grpc_port, "raft": first.raft_port}
    env = dict(
        first.env,
        GPU_PLATFORM_RAFT_PORT=str(ports["raft"] if taken == "raft" else 0),
        GPU_PLATFORM_GRPC_PORT=str(ports["grpc"] if taken == "grpc" else 0),
        GPU_PLATFORM_LOG_LEVEL="error",
    )
    rest = ports["rest"] if taken == "rest" else 0
    second = subprocess.run(
        [*ENTRY, "serve", "--data-dir", str(tmp_path / "other"), "--port", str(rest),
         "--agent-port", "0"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert second.returncode != 0
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert f"port {ports[taken]}" in lines[0] and lines[0].startswith("error: "), lines
    assert first.healthy()


STUBBORN = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print(os.getpid(), flush=True)\n"
    "time.sleep(600)\n"
)


def test_kill_after_cancel_escalates_during_the_grace_period(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory(GPU_PLATFORM_STOP_GRACE_SECONDS="600")
    job_id = submitted_id(server.cli("submit", "-q", "--", sys.executable, "-c", STUBBORN))
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    assert wait_for(lambda: server.cli("jobs", "logs", job_id).stdout.strip().isdigit())
    pid = int(server.cli("jobs", "logs", job_id).stdout.strip())
    assert server.cli("jobs", "cancel", job_id).returncode == 0
    assert pid_alive(pid)  # it ignores SIGTERM: the grace period runs
    killed = server.cli("jobs", "kill", job_id)
    assert killed.returncode == 0, killed.stderr
    assert wait_for(lambda: not pid_alive(pid))


def test_submit_wait_exits_non_zero_when_the_job_fails(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    failed = server.cli("submit", "--wait", "--max-attempts", "1", "--", "false")
    assert failed.returncode != 0
    assert "FAILED" in failed.stdout
    done = server.cli("submit", "--wait", "--", "true")
    assert done.returncode == 0, done.stderr
