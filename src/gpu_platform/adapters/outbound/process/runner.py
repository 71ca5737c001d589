"""ProcessJobRunner: each attempt is a real process in its own session and process group.

- Launches happen on one long-lived launcher thread. It starts the runner's launch server
  (`launch_server.py`) at the first launch, and each task is forked from that server and runs
  the exec shim (`_shim.py`). PR_SET_PDEATHSIG fires when the *thread* that forked dies: each
  task dies with the launch server, and the launch server with the launcher thread, so that
  thread must live as long as the runner.
- The attempt is confined by the Isolation adapter (cgroups) before it execs: the shim writes
  its own pid into the attempt's cgroups first.
- stdout and stderr go through a pipe to `<root>/<job_id>/attempt-<n>.log`, capped at
  `log_max_bytes` (the rest is discarded and the cut is marked in the log).
- The environment is the runner's own (less its secrets) plus the job's, plus the vendor's
  visible-device masks (see `visibility_env`; a MIG job gets its MIG device UUIDs), single-task
  rank variables, and the GPU_PLATFORM_JOB_ID / GPU_PLATFORM_ATTEMPT markers
  (`environment.py`).
- Device confinement: the GPUs' device nodes (a MIG job: its parent GPU's /dev/nvidiaN), the
  control nodes, and the nvidia-uvm / nvidia-caps majors (`cgroups.devices`).
- When the attempt's main process exits, the rest of its process group is SIGKILLed and its
  cgroups are emptied and removed before the exit is reported: nothing outlives the report.
- Accounts, `cwd`, PID namespaces: `accounts.py` (and `_shim.py`).
- `reap` finds leftovers of an attempt started by an earlier incarnation through the
  GPU_PLATFORM_ATTEMPT marker in /proc/*/environ, kills them, and removes its cgroups.
"""

from __future__ import annotations

import os
import pwd
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

from gpu_platform.adapters.outbound.cgroups.devices import gpu_device_rules
from gpu_platform.adapters.outbound.cgroups.noop import NoopIsolation
from gpu_platform.adapters.outbound.process.accounts import (
    SHIM,
    check_cwd,
    job_account,
    pid_namespaces_work,
    without_secrets,
)
from gpu_platform.adapters.outbound.process.environment import (
    free_port,
    master_port,
    task_environment,
    visibility_env,
)
from gpu_platform.adapters.outbound.process.fence import ProcessLeaseFence
from gpu_platform.adapters.outbound.process.launch_server import LaunchedProcess, LaunchServer
from gpu_platform.adapters.outbound.process.leftovers import (
    kill_marked,
    require_mig_instance,
    signal_group,
)
from gpu_platform.adapters.outbound.process.logs import (
    attempt_log_path,
    pump_log,
    read_tail,
    write_capped,
)
from gpu_platform.ports.outbound.isolation import (
    Isolation,
    IsolationError,
    IsolationSpec,
    WrapsCommand,
)
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.ports.outbound.node_lease import LEASE_ENDED

__all__ = [
    "ProcessJobRunner",
    "attempt_log_path",
    "free_port",
    "master_port",
    "pump_log",
    "read_tail",
    "task_environment",
    "visibility_env",
    "write_capped",
]

log = structlog.get_logger(__name__)
FENCED = "stopped by the node's lease fence: its agent lost touch with the leader"


@dataclass
class _Attempt:
    spec: LaunchSpec
    proc: LaunchedProcess  # or, in the benchmark's baseline, a Popen of the shim
    pump: threading.Thread
    waiter: threading.Thread | None = None
    kill_timer: threading.Timer | None = None
    limit_timer: threading.Timer | None = None
    timed_out: bool = False
    cgroups: bool = False


class ProcessJobRunner:
    """Implements JobRunner with subprocesses. Thread-safe."""

    def __init__(
        self,
        log_root: str | Path,
        base_env: dict[str, str] | None = None,
        *,
        isolation: Isolation | None = None,
        visible_devices: Literal["index", "uuid"] = "index",
        log_max_bytes: int = 100 << 20,
        pids_max: int | None = None,
        device_majors: dict[str, int] | None = None,
        fence: ProcessLeaseFence | None = None,
        default_user: str | None = None,
        pid_namespace: bool = False,
        protected: tuple[Path, ...] = (),
    ) -> None:
        """`fence`: the node's lease fence (an agent's runner); each task runs under it.
        `default_user`: the account of a job naming none (None: the runner's own);
        `pid_namespace`: each task in its own PID namespace (root only; see `_shim.py`);
        `protected`: directories no job may use as its `cwd` (besides `log_root`)."""
        self.log_root = Path(log_root)
        self.fence = fence
        self.log_root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.log_root, 0o700)  # a job reaches `..` from its log dir: not other jobs'
        self.isolation = isolation or NoopIsolation()
        self._base_env = without_secrets(os.environ if base_env is None else base_env)
        self._visible = visible_devices
        self._log_max = log_max_bytes
        self._pids_max = pids_max
        self._majors = device_majors
        self._default_user = default_user
        self._pidns = pid_namespace and pid_namespaces_work(SHIM)
        self._protected = tuple(p.resolve() for p in (*protected, self.log_root))
        self._lock = threading.Lock()
        self._live: dict[tuple[str, int, int], _Attempt] = {}  # (job, epoch, rank)
        self._ports: dict[tuple[str, int], int] = {}  # gang rendezvous port per attempt
        self._pending: dict[tuple[str, int, int], float | None] = {}  # launching: stop grace
        self._requests: queue.Queue[
            tuple[LaunchSpec, Callable[[ExitReport], None], Future[None], float] | None
        ] = queue.Queue()
        self.launch_server = LaunchServer(without_secrets(os.environ))
        self._launcher = threading.Thread(
            target=self._launch_loop, name="job-launcher", daemon=True
        )
        self._launcher.start()

    @property
    def pid_namespace(self) -> bool:
        """Whether each task gets its own PID namespace (asked for, and this host allows it)."""
        return self._pidns

    # -- JobRunner -------------------------------------------------------------------------

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        key = (spec.job_id, spec.epoch, spec.rank)
        done: Future[None] = Future()
        with self._lock:
            self._pending[key] = None
        try:
            self._requests.put((spec, on_exit, done, time.monotonic()))
            done.result()
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def stop(self, job_id: str, epoch: int, grace_s: float) -> bool:
        """A task still being launched is stopped as soon as it runs (its launch may take
        until its job has executed, and it carries no attempt marker before that)."""
        with self._lock:
            tasks = [a for (j, e, _), a in self._live.items() if (j, e) == (job_id, epoch)]
            launching = [k for k in self._pending if k[:2] == (job_id, epoch)]
            for key in launching:
                asked = self._pending[key]
                self._pending[key] = grace_s if asked is None else min(asked, grace_s)
            if not tasks:
                if launching:
                    log.info("stopping attempt once launched", job_id=job_id, epoch=epoch)
                return bool(launching)
            for attempt in tasks:
                pid = attempt.proc.pid
                if attempt.kill_timer is not None:  # already stopping: only a kill escalates
                    if grace_s <= 0:
                        attempt.kill_timer.cancel()
                        signal_group(pid, signal.SIGKILL)
                    continue
                signal_group(pid, signal.SIGTERM)
                timer = threading.Timer(grace_s, signal_group, (pid, signal.SIGKILL))
                timer.daemon = True
                attempt.kill_timer = timer
                timer.start()
        log.info("stopping attempt", job_id=job_id, epoch=epoch, grace_s=grace_s, tasks=len(tasks))
        return True

    def stop_all(self, grace_s: float) -> None:
        with self._lock:
            keys = {(j, e) for j, e, _ in self._live}
        for job_id, epoch in sorted(keys):
            self.stop(job_id, epoch, grace_s)
        with self._lock:
            waiters = [a.waiter for a in self._live.values() if a.waiter is not None]
        for waiter in waiters:
            waiter.join(timeout=grace_s + 10)

    def close(self, grace_s: float = 10.0) -> None:
        """Stop every attempt, then the launcher thread and the launch server."""
        self.stop_all(grace_s)
        self._requests.put(None)
        self._launcher.join(timeout=5)
        if self.fence is not None:
            self.fence.close()

    def reap(self, job_id: str, epoch: int) -> int:
        killed = kill_marked(job_id, epoch)
        self._release(job_id, epoch)  # other ranks' units: swept at start-up (Isolation.sweep)
        if killed:
            log.warning("reaped leftover processes", job_id=job_id, epoch=epoch, killed=killed)
        return killed

    def read_log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int, rank: int = 0
    ) -> bytes:
        try:
            with self.log_path(job_id, attempt, rank).open("rb") as f:
                f.seek(offset)
                return f.read(max_bytes)
        except FileNotFoundError:
            return b""

    def read_log(self, job_id: str, attempt: int, tail_bytes: int, rank: int = 0) -> str:
        return read_tail(self.log_path(job_id, attempt, rank), tail_bytes)

    # -- internals ---------------------------------------------------------------------------

    def log_path(self, job_id: str, attempt: int, rank: int = 0) -> Path:
        return attempt_log_path(self.log_root, job_id, attempt, rank)

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        env = dict(self._base_env)
        env.update(task_environment(spec, self._visible, self._port_of(spec)))
        return env

    def _port_of(self, spec: LaunchSpec) -> int:
        with self._lock:
            return master_port(spec, self._ports)

    @staticmethod
    def _unit(job_id: str, epoch: int, rank: int) -> str:
        """Isolation unit name of one task (rank 0 keeps the single-task name)."""
        return f"{job_id}.{epoch}" if rank == 0 else f"{job_id}.{epoch}.{rank}"

    def isolation_spec(self, spec: LaunchSpec) -> IsolationSpec:
        return IsolationSpec(
            name=self._unit(spec.job_id, spec.epoch, spec.rank),
            cpus=spec.cpus,
            mems=spec.mems,
            memory_bytes=spec.memory_bytes,
            cpu_milli=spec.cpu_milli,
            pids_max=self._pids_max,
            devices=gpu_device_rules(spec.vendor, spec.gpu_indices, self._majors),
        )

    def _launch_loop(self) -> None:
        while (item := self._requests.get()) is not None:
            spec, on_exit, done, asked = item  # asked: when start() was called
            try:
                self._launch(spec, on_exit, asked)
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)
        self.launch_server.close()

    def _launch(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None], at: float) -> None:
        require_mig_instance(spec)
        env = self.environment(spec)
        program = spec.argv[0]
        if shutil.which(program, path=env.get("PATH")) is None:
            raise LaunchError(f"program {program!r} not found or not executable")
        path = self.log_path(spec.job_id, spec.attempt, spec.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        account = job_account(spec.user, self._default_user)
        if account is not None:
            os.chown(path.parent, account.pw_uid, account.pw_gid)  # its default cwd
        if spec.cwd is not None:
            check_cwd(spec.cwd, self._protected)
        try:
            joins = self.isolation.prepare(self.isolation_spec(spec))
        except IsolationError as exc:
            raise LaunchError(f"isolation ({self.isolation.name}): {exc}") from exc
        shim, wrapper = self._shim_options(spec, joins, account)
        try:  # the launch server up before the lease check: the fork follows the check at once
            self._ready()
        except LaunchError:
            self._release(spec.job_id, spec.epoch, spec.rank)
            raise
        if self.fence is not None and self.fence.ended(since=at):  # ended since it was asked
            self._release(spec.job_id, spec.epoch, spec.rank)  # for: stale, may run elsewhere
            raise LaunchError(f"{LEASE_ENDED}: not starting job {spec.job_id} here")
        try:
            proc = self._spawn(shim, [*wrapper, *spec.argv], env, str(path.parent))
        except LaunchError:
            self._release(spec.job_id, spec.epoch, spec.rank)
            raise
        assert proc.stdout is not None
        pump = threading.Thread(
            target=pump_log,
            args=(proc.stdout, path, self._log_max),
            name=f"log-{spec.job_id}",
            daemon=True,
        )
        attempt = _Attempt(spec, proc, pump, cgroups=bool(joins or wrapper))
        attempt.waiter = threading.Thread(
            target=self._wait, args=(attempt, on_exit), name=f"wait-{spec.job_id}", daemon=True
        )
        if spec.time_limit_s is not None:
            attempt.limit_timer = threading.Timer(spec.time_limit_s, self._time_up, (attempt,))
            attempt.limit_timer.daemon = True
        with self._lock:
            self._live[(spec.job_id, spec.epoch, spec.rank)] = attempt
            stop_grace = self._pending.pop((spec.job_id, spec.epoch, spec.rank), None)
        self._go(attempt)
        if stop_grace is not None:  # stopped while it was being launched
            self.stop(spec.job_id, spec.epoch, stop_grace)
        log.info(
            "attempt started",
            job_id=spec.job_id,
            epoch=spec.epoch,
            gpus=list(spec.gpu_indices),
            mig=list(spec.mig_uuids),
            rank=spec.rank,
            pid=proc.pid,
            isolation=self.isolation.name,
            log=str(path),
        )

    def _shim_options(
        self, spec: LaunchSpec, joins: Sequence[str], account: pwd.struct_passwd | None
    ) -> tuple[list[str], tuple[str, ...]]:
        """The shim's options (`_shim.py`) and the isolation's command prefix, if any."""
        shim: list[str] = []  # the shim's options (`_shim.py`)
        if self.fence is not None:  # the task names itself in the fence before it runs
            shim += ["--fence", str(self.fence.tasks)]
        for join in joins:
            shim += ["--join", join]
        if self._own_pid_namespace(spec):
            shim.append("--pidns")
        if spec.cwd is not None:
            shim += ["--cwd", spec.cwd]
        wrapper: tuple[str, ...] = ()
        if isinstance(self.isolation, WrapsCommand):  # e.g. systemd-run --scope: it drops to
            uid, gid = (account.pw_uid, account.pw_gid) if account else (None, None)  # the user
            wrapper = self.isolation.command_prefix(self.isolation_spec(spec).name, uid, gid)
        elif account is not None:
            shim += ["--user", f"{account.pw_uid}:{account.pw_gid}"]
        return shim, wrapper

    def _ready(self) -> None:
        self.launch_server.ready()

    def _spawn(
        self, options: list[str], argv: list[str], env: dict[str, str], cwd: str
    ) -> LaunchedProcess:
        """The task: forked by the launch server, running the shim with `options`, `argv`."""
        return self.launch_server.spawn(options, argv, env, cwd)

    def _own_pid_namespace(self, spec: LaunchSpec) -> bool:
        """Not under systemd-run (it names its own pid to systemd) nor for an MPS client."""
        return self._pidns and spec.mps is None and not isinstance(self.isolation, WrapsCommand)

    def _go(self, attempt: _Attempt) -> None:
        """Put the started task under the node's lease (an agent's runner), then watch it."""
        if self.fence is not None:
            self.fence.register(attempt.proc.pid)
        attempt.pump.start()
        assert attempt.waiter is not None
        attempt.waiter.start()
        if attempt.limit_timer is not None:
            attempt.limit_timer.start()

    def _time_up(self, attempt: _Attempt) -> None:
        attempt.timed_out = True
        log.warning(
            "time limit reached", job_id=attempt.spec.job_id, limit_s=attempt.spec.time_limit_s
        )
        self.stop(attempt.spec.job_id, attempt.spec.epoch, grace_s=10.0)  # the whole gang

    def _wait(self, attempt: _Attempt, on_exit: Callable[[ExitReport], None]) -> None:
        spec = attempt.spec
        code = attempt.proc.wait()
        signal_group(attempt.proc.pid, signal.SIGKILL)  # nothing of the attempt outlives it
        fenced = self.fence is not None and self.fence.unregister(attempt.proc.pid)
        if not attempt.cgroups:  # no cgroup to empty: escapees go by their task's marker
            kill_marked(spec.job_id, spec.epoch, spec.rank)
        for timer in (attempt.kill_timer, attempt.limit_timer):
            if timer is not None:
                timer.cancel()
        if attempt.cgroups:
            self._release(spec.job_id, spec.epoch, spec.rank)
        attempt.pump.join(timeout=10)
        with self._lock:
            self._live.pop((spec.job_id, spec.epoch, spec.rank), None)
            if not any((j, e) == (spec.job_id, spec.epoch) for j, e, _ in self._live):
                self._ports.pop((spec.job_id, spec.epoch), None)
        limit = spec.time_limit_s if attempt.timed_out else None
        report = ExitReport(
            spec.job_id,
            spec.epoch,
            None if code < 0 else code,
            signal=-code if code < 0 else None,
            timed_out_after_s=limit,
            rank=spec.rank,
            detail=FENCED if fenced else "",
            fenced=fenced,
        )
        try:
            on_exit(report)
        except Exception:
            log.exception("exit callback failed", job_id=spec.job_id, epoch=spec.epoch)

    def _release(self, job_id: str, epoch: int, rank: int = 0) -> None:
        name = self._unit(job_id, epoch, rank)
        try:
            self.isolation.release(name)
        except IsolationError as exc:
            log.error("could not remove isolation", unit=name, error=str(exc))
