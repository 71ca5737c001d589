"""ProcessJobRunner: each attempt is a real process in its own session and process group.

- Launches happen on one long-lived launcher thread: the exec shim's PR_SET_PDEATHSIG fires
  when the *thread* that forked dies, so that thread must live as long as the runner.
- stdout and stderr go to `<root>/<job_id>/attempt-<n>.log`.
- The environment is the runner's own plus the job's, plus CUDA_VISIBLE_DEVICES (the node-local
  indices; empty for a CPU-only job) and GPU_PLATFORM_JOB_ID / GPU_PLATFORM_ATTEMPT markers.
- When the attempt's main process exits, the rest of its process group is SIGKILLed before the
  exit is reported, so no process outlives its report.
- `reap` finds leftovers of an attempt started by an earlier incarnation through the
  GPU_PLATFORM_ATTEMPT marker in /proc/*/environ and kills them.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog

from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec

__all__ = ["ProcessJobRunner"]

log = structlog.get_logger(__name__)
_SHIM = str(Path(__file__).with_name("_shim.py"))
MARKER = "GPU_PLATFORM_ATTEMPT"


@dataclass
class _Attempt:
    spec: LaunchSpec
    proc: subprocess.Popen[bytes]
    log_file: IO[bytes]
    waiter: threading.Thread
    kill_timer: threading.Timer | None = None


class ProcessJobRunner:
    """Implements JobRunner with subprocesses. Thread-safe."""

    def __init__(self, log_root: str | Path, base_env: dict[str, str] | None = None) -> None:
        self.log_root = Path(log_root)
        self.log_root.mkdir(parents=True, exist_ok=True)
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._lock = threading.Lock()
        self._live: dict[tuple[str, int], _Attempt] = {}
        self._requests: queue.Queue[
            tuple[LaunchSpec, Callable[[ExitReport], None], Future[None]] | None
        ] = queue.Queue()
        self._launcher = threading.Thread(
            target=self._launch_loop, name="job-launcher", daemon=True
        )
        self._launcher.start()

    # -- JobRunner -------------------------------------------------------------------------

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        done: Future[None] = Future()
        self._requests.put((spec, on_exit, done))
        done.result()

    def stop(self, job_id: str, epoch: int, grace_s: float) -> bool:
        with self._lock:
            attempt = self._live.get((job_id, epoch))
            if attempt is None:
                return False
            if attempt.kill_timer is not None:
                return True
            _signal_group(attempt.proc.pid, signal.SIGTERM)
            timer = threading.Timer(grace_s, _signal_group, (attempt.proc.pid, signal.SIGKILL))
            timer.daemon = True
            attempt.kill_timer = timer
            timer.start()
        log.info("stopping attempt", job_id=job_id, epoch=epoch, grace_s=grace_s)
        return True

    def stop_all(self, grace_s: float) -> None:
        with self._lock:
            keys = list(self._live)
        for job_id, epoch in keys:
            self.stop(job_id, epoch, grace_s)
        with self._lock:
            waiters = [a.waiter for a in self._live.values()]
        for waiter in waiters:
            waiter.join(timeout=grace_s + 10)

    def close(self, grace_s: float = 10.0) -> None:
        """Stop every attempt, then the launcher thread."""
        self.stop_all(grace_s)
        self._requests.put(None)
        self._launcher.join(timeout=5)

    def reap(self, job_id: str, epoch: int) -> int:
        needle = f"{MARKER}={job_id}:{epoch}".encode()
        killed = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed += 1
        if killed:
            log.warning("reaped leftover processes", job_id=job_id, epoch=epoch, killed=killed)
        return killed

    def read_log(self, job_id: str, attempt: int, tail_bytes: int) -> str:
        path = self.log_path(job_id, attempt)
        try:
            with path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - tail_bytes))
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    # -- internals ---------------------------------------------------------------------------

    def log_path(self, job_id: str, attempt: int) -> Path:
        if "/" in job_id or job_id.startswith("."):
            raise ValueError(f"bad job id {job_id!r}")
        return self.log_root / job_id / f"attempt-{attempt}.log"

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        env = dict(self._base_env)
        env.update(dict(spec.env))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.gpu_indices)
        env["GPU_PLATFORM_JOB_ID"] = spec.job_id
        env[MARKER] = f"{spec.job_id}:{spec.epoch}"
        return env

    def _launch_loop(self) -> None:
        while (item := self._requests.get()) is not None:
            spec, on_exit, done = item
            try:
                self._launch(spec, on_exit)
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

    def _launch(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        env = self.environment(spec)
        program = spec.argv[0]
        if shutil.which(program, path=env.get("PATH")) is None:
            raise LaunchError(f"program {program!r} not found or not executable")
        path = self.log_path(spec.job_id, spec.attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        cwd = spec.cwd or str(path.parent)
        if not Path(cwd).is_dir():
            raise LaunchError(f"working directory {cwd!r} does not exist")
        log_file = path.open("ab")
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _SHIM, str(os.getpid()), "--", *spec.argv],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            log_file.close()
            raise LaunchError(f"cannot start {program!r}: {exc.strerror or exc}") from exc
        waiter = threading.Thread(
            target=self._wait, args=(spec, on_exit), name=f"wait-{spec.job_id}", daemon=True
        )
        with self._lock:
            self._live[(spec.job_id, spec.epoch)] = _Attempt(spec, proc, log_file, waiter)
        waiter.start()
        log.info(
            "attempt started", job_id=spec.job_id, epoch=spec.epoch, pid=proc.pid, log=str(path)
        )

    def _wait(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        with self._lock:
            attempt = self._live[(spec.job_id, spec.epoch)]
        code = attempt.proc.wait()
        _signal_group(attempt.proc.pid, signal.SIGKILL)  # nothing of the attempt outlives it
        if attempt.kill_timer is not None:
            attempt.kill_timer.cancel()
        attempt.log_file.close()
        with self._lock:
            self._live.pop((spec.job_id, spec.epoch), None)
        if code < 0:
            report = ExitReport(spec.job_id, spec.epoch, None, signal=-code)
        else:
            report = ExitReport(spec.job_id, spec.epoch, code)
        try:
            on_exit(report)
        except Exception:
            log.exception("exit callback failed", job_id=spec.job_id, epoch=spec.epoch)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
