"""The systems the peer benchmarks drive, each started in a temp dir and stopped afterwards:

- `local_slurm()`: a single-node Slurm on loopback (Debian's slurmctld, slurmd, munge): its
  own munge key and socket, slurm.conf, spool and state dirs; munged, slurmctld and slurmd run
  in the foreground as our children and are stopped (then killed) on exit. Nothing is left
  running and nothing outside the temp dir is touched; clients find it via SLURM_CONF.
- `local_server()`: `gpu-platform serve` (the default server: a one-voter Raft cluster with its
  in-process agent) on free ports, as bench_e2e.py starts it.

Both jobs run the same trivial script, which writes the wall-clock time it started into
`<started_dir>/<job id>`: submit → started is that time minus the client's submit time (one
machine, one clock). `slurm_missing()` says why Slurm cannot run here, or None.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from gpu_platform.testing.ports import reserve_port, wait_for_ports

ENTRY = [sys.executable, "-m", "gpu_platform.main"]
SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue")
# What each job runs: the time it started, to the nanosecond, into a file named by its id.
STARTED = 'date +%s.%N > "{dir}/${{SLURM_JOB_ID:-$GPU_PLATFORM_JOB_ID}}"'


def slurm_missing() -> str | None:
    absent = [b for b in SLURM_BINARIES if shutil.which(b) is None]
    if absent:
        return (
            f"{', '.join(absent)} not found (`make deps` installs Debian's slurmctld slurmd "
            "slurm-client munge)"
        )
    if os.geteuid() != 0:
        return "slurmd launches jobs as root only here (run `make bench` as root)"
    return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


def _drain(env: dict[str, str]) -> None:
    """Cancel whatever is still queued or running and wait (a while) for the queue to empty."""
    subprocess.run(["scancel", "--full", "--partition=bench"], env=env, check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, check=False
        )
        if not out.stdout.strip():
            return
        time.sleep(0.2)


def _kill_left_behind(conf_dir: Path) -> None:
    """SIGKILL any process (a slurmstepd or a job) still carrying this instance's SLURM_CONF:
    slurmd does not take its job steps down with it."""
    marker = f"SLURM_CONF={conf_dir}/slurm.conf".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


@dataclass(frozen=True)
class Slurm:
    conf: Path
    started_dir: Path
    script: Path
    env: dict[str, str]

    def sbatch_args(self) -> list[str]:
        return ["sbatch", "--parsable", "--output=/dev/null", str(self.script)]


_SLURM_CONF = """\
ClusterName=bench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MaxJobCount=100000
MinJobAge=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=64 RealMemory=1000 State=UNKNOWN
PartitionName=bench Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


@contextmanager
def local_slurm() -> Iterator[Slurm]:
    """A running single-node Slurm (64 job slots on this host); stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp, ExitStack() as stack:
        d = Path(tmp)
        d.chmod(0o711)  # munged wants its socket's directory reachable by every user
        for sub in ("state", "spool", "started"):
            (d / sub).mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        munged = subprocess.Popen(
            [
                *("munged", "-F", "--force", f"--socket={d}/munge.sock", f"--key-file={key}"),
                *(f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log"),
                f"--seed-file={d}/munged.seed",
            ],
            **quiet,  # type: ignore[arg-type]
        )
        stack.callback(_stop, munged)
        stack.callback(_kill_left_behind, d)  # runs after the daemons stopped
        _wait((d / "munge.sock").exists, 20, "munged")
        conf = d / "slurm.conf"
        conf.write_text(_SLURM_CONF.format(dir=d, ctld_port=reserve_port(), d_port=reserve_port()))
        env = dict(os.environ, SLURM_CONF=str(conf))
        ctld = subprocess.Popen(["slurmctld", "-D", "-f", str(conf)], env=env, **quiet)  # type: ignore[call-overload]
        stack.callback(_stop, ctld)
        slurmd = subprocess.Popen(
            ["slurmd", "-D", "-f", str(conf), "-N", "localhost"],
            env=env,
            **quiet,  # type: ignore[arg-type]
        )
        stack.callback(_stop, slurmd)  # runs first: slurmd, then slurmctld, then munged

        def idle() -> bool:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, check=False
            )
            return out.stdout.strip() == "idle"

        _wait(idle, 60, "slurmd (node idle)")
        stack.callback(_drain, env)  # runs first: no job may outlive slurmd
        script = d / "job.sh"
        script.write_text("#!/bin/sh\n" + STARTED.format(dir=d / "started") + "\n")
        script.chmod(0o755)
        yield Slurm(conf, d / "started", script, env)


@dataclass(frozen=True)
class Server:
    url: str
    grpc_target: str
    started_dir: Path
    env: dict[str, str]

    def command(self) -> list[str]:
        return ["sh", "-c", STARTED.format(dir=self.started_dir)]


@contextmanager
def local_server(store: str = "raft") -> Iterator[Server]:
    """The default server (`store="raft"`) or the embedded core (`"sqlite"`), stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as tmp:
        started = Path(tmp) / "started"
        started.mkdir()
        # jobs run as an unprivileged account (no `user` given): they must reach and write it
        os.chmod(tmp, 0o711)
        os.chmod(started, 0o1777)
        env = dict(
            os.environ,
            GPU_PLATFORM_LOG_LEVEL="warning",
            GPU_PLATFORM_LOG_FORMAT="json",
            GPU_PLATFORM_GRPC_PORT="0",  # any free port, as is --port 0: see ports.json
            GPU_PLATFORM_SERVER_ID="1" if store == "raft" else "0",
            GPU_PLATFORM_RAFT_PORT="0",
            GPU_PLATFORM_AGENT_PORT="0",
            GPU_PLATFORM_ISOLATION="none",
        )
        proc = subprocess.Popen(
            [*ENTRY, "serve", "--port", "0", "--data-dir", str(Path(tmp) / "data")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            ports = wait_for_ports(Path(tmp) / "data", proc, timeout=60)
            url, grpc_port = f"http://127.0.0.1:{ports['rest']}", ports["grpc"]

            def healthy() -> bool:
                try:
                    return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return proc.poll() is not None  # died: stop waiting, fail below

            _wait(healthy, 60, "gpu-platform serve")
            if proc.poll() is not None:
                raise RuntimeError(f"gpu-platform serve exited with {proc.returncode}")
            yield Server(url, f"127.0.0.1:{grpc_port}", started, dict(env, GPU_PLATFORM_SERVER=url))
        finally:
            _stop(proc)


def started_times(started_dir: Path, ids: list[str], timeout: float) -> dict[str, float]:
    """Wall-clock start time of each job in `ids` that started within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    out: dict[str, float] = {}
    while True:
        for job_id in ids:
            if job_id not in out:
                try:
                    text = (started_dir / job_id).read_text().strip()
                except FileNotFoundError:
                    continue
                if text:
                    out[job_id] = float(text)
        if len(out) == len(ids) or time.monotonic() > deadline:
            return out
        time.sleep(0.2)
