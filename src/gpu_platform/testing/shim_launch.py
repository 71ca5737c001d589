"""The process runner's launch path before its launch server, kept for tests and benchmarks
only: a new `python -I -S _shim.py` per task, started with `subprocess.Popen`.

`popen_shim` is the old call, word for word; `ShimJobRunner` is a `ProcessJobRunner` that
launches through it. Tests compare what a job sees under both (it must be the same), and
`tests/benchmarks/bench_job_spawn.py` measures both in one run. Never wired into the product:
the runner has one launch mechanism and no fallback.
"""

from __future__ import annotations

import os
import subprocess
import sys

from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.process.accounts import SHIM
from gpu_platform.ports.outbound.job_runner import LaunchError

__all__ = ["ShimJobRunner", "popen_shim"]


def popen_shim(
    options: list[str], argv: list[str], env: dict[str, str], cwd: str
) -> subprocess.Popen[bytes]:
    """A task as the runner started one before: the standalone shim, this process its parent."""
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", SHIM, str(os.getpid()), *options, "--", *argv],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        raise LaunchError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from exc


class ShimJobRunner(ProcessJobRunner):
    """A ProcessJobRunner whose tasks each start a new Python shim (the old path)."""

    def _ready(self) -> None:
        """No launch server: each task is its own shim process."""

    def _spawn(  # type: ignore[override]
        self, options: list[str], argv: list[str], env: dict[str, str], cwd: str
    ) -> subprocess.Popen[bytes]:
        return popen_shim(options, argv, env, cwd)
