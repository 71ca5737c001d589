"""What a job's task runs as: its account, working directory, environment and PID namespace.

A job naming no `user` runs as the node's default job account (the agent's `job_user`,
`nobody` unless configured) when the runner is root; a runner that is not root runs every
task as itself (it cannot switch) and refuses a job naming another account. Which accounts a
job may name at all is decided at submit (`domain.model.run_as`); here only what the node can
check: the account exists, the runner may become it, and the job's `cwd` is an existing
directory outside the node's protected directories (its data directory: secrets, state and
other jobs' logs). Whether the account may use that directory is checked by the shim, which
enters it after dropping to the account. With the runner's `pid_namespace` each task gets its
own PID namespace and /proc (`_shim.py`), so no job sees another's processes or
/proc/PID/environ; `pid_namespaces_work` probes once whether this host allows it (root, and a
kernel or container that lets it unshare one). `without_secrets` keeps the agent's own secret
variables out of every job's environment.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import structlog

from gpu_platform.ports.outbound.job_runner import LaunchError

__all__ = [
    "SECRET_NAME",
    "SHIM",
    "check_cwd",
    "check_outside",
    "job_account",
    "pid_namespaces_work",
    "without_secrets",
]

SHIM = str(Path(__file__).with_name("_shim.py"))  # the exec shim (`_shim.py`)
log = structlog.get_logger(__name__)
#: The agent's own environment variables that are secrets (the cluster token, a CLI token):
#: `GPU_PLATFORM_...` names holding TOKEN, SECRET or PASSWORD. Jobs never inherit them.
SECRET_NAME = re.compile(r"^GPU_PLATFORM_\w*(TOKEN|SECRET|PASSWORD)\w*$")


def job_account(user: str | None, default_user: str | None) -> pwd.struct_passwd | None:
    """The task's account: `user`, else `default_user` when this process is root; None: this
    process's own. LaunchError for an unknown account or one a non-root runner cannot be."""
    name = user
    if name is None:
        if default_user is None or os.geteuid() != 0:
            return None
        name = default_user
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise LaunchError(f"cannot run as user {name!r}: no such user") from None
    if os.geteuid() not in (0, account.pw_uid):
        raise LaunchError(f"cannot run as user {name!r}: the node agent is not root")
    return account


def check_cwd(cwd: str, protected: Iterable[Path]) -> None:
    """LaunchError unless `cwd` is an absolute path to an existing directory that is not in
    (or equal to) a `protected` directory, symbolic links resolved."""
    where = Path(cwd)
    if not where.is_absolute():
        raise LaunchError(f"working directory {cwd!r} is not an absolute path")
    if not where.is_dir():
        raise LaunchError(f"working directory {cwd!r} does not exist")
    check_outside(where, protected, "working directory")


def check_outside(path: Path, protected: Iterable[Path], what: str) -> None:
    """LaunchError ("permission denied") if `path`, symbolic links resolved, is a protected
    directory or lies inside one. (A path above one, such as /, is left to the permissions:
    the protected directory is mode 0700 and jobs run as other accounts.)"""
    real = path.resolve()
    for p in protected:
        top = p.resolve()
        if real == top or top in real.parents:
            raise LaunchError(f"{what} {str(path)!r}: permission denied (the node's data)")


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less the platform's secret variables (`SECRET_NAME`)."""
    return {k: v for k, v in env.items() if not SECRET_NAME.match(k)}


def pid_namespaces_work(shim: str = SHIM) -> bool:
    """Whether the exec shim can run a task in its own PID namespace here (root, and a kernel
    or container that lets it unshare one); if not, says why in a warning."""
    why = None
    if os.geteuid() != 0:
        why = "the runner is not root"
    else:
        argv = [sys.executable, "-I", "-S", shim, str(os.getpid()), "--pidns", "--", "true"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            if done.returncode != 0:
                why = done.stderr.strip() or f"exit status {done.returncode}"
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = str(exc)
    if why is not None:
        log.warning("jobs share the host's PID namespace", reason=why)
    return why is None
