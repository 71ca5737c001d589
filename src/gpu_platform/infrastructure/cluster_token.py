"""The cluster token: the secret that makes a process a member of one cluster.

Agents (and, with it, joining servers) present it when they connect; a server refuses a
connection that presents another cluster's token, or none, with a clear reason on both sides —
so a stray `serve` or agent pointed at the wrong ports never joins by accident. Where it comes
from, first match wins:

1. the `cluster_token` setting (`GPU_PLATFORM_CLUSTER_TOKEN`);
2. the file named by `cluster_token_file` (`GPU_PLATFORM_CLUSTER_TOKEN_FILE`);
3. `<data_dir>/cluster-token`, written (mode 0600) when a server bootstraps a one-voter
   cluster with neither set — shown once in the log, like the admin token.

Servers started with `peers` (or `--join`) and agents must be given it: the start refuses
otherwise, in one line. The cluster id is a digest of the token (safe to show).
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import structlog

from gpu_platform.adapters.cluster_identity import cluster_id
from gpu_platform.infrastructure.config import ConfigError, Settings

__all__ = ["cluster_token"]

log = structlog.get_logger(__name__)


def cluster_token(settings: Settings, *, server: bool) -> str:
    """This process's cluster token (see the module docstring); raises ConfigError."""
    if settings.cluster_token:
        return settings.cluster_token
    if settings.cluster_token_file is not None:
        return _read(settings.cluster_token_file, "cluster_token_file")
    own = settings.data_dir / "cluster-token"
    if own.exists():
        return _read(own, "cluster token file")
    bootstraps = server and not settings.peers.strip() and not settings.join
    if not bootstraps:
        who = "an agent" if not server else "a server with peers or --join"
        raise ConfigError(
            f"cluster_token: {who} needs this cluster's token (set GPU_PLATFORM_CLUSTER_TOKEN "
            "or cluster_token_file; a one-voter server writes it to <data_dir>/cluster-token)"
        )
    token = "gpc_" + secrets.token_urlsafe(24)
    own.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    log.warning(
        "cluster token created: agents and joining servers present it",
        cluster=cluster_id(token),
        file=str(own.resolve()),
    )
    print(f"cluster token (shown once; also in {own}): {token}", file=sys.stderr, flush=True)
    return token


def _read(path: Path, what: str) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if not token:
        raise ConfigError(f"{what}: {path} is empty")
    return token
