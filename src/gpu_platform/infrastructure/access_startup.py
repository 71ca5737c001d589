"""Start-up of authentication: the admin token file, and on a replicated cluster the thread
that bootstraps and imports through the Raft log (`application.access_setup`).

The bootstrap token's secret is written to `<data_dir>/admin-token` (mode 0600) of the server
that created it and printed once to stderr; a replicated cluster creates it on the first
server to lead, so that server's data dir holds the file.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import structlog

from gpu_platform.application.access_replica import ReplicatedAccessStore
from gpu_platform.application.access_setup import ReplicatedAccessSetup
from gpu_platform.application.auth import AccessControl
from gpu_platform.infrastructure.config import Settings
from gpu_platform.ports.inbound.access import IssuedToken
from gpu_platform.ports.outbound.access_store import AccessStore

__all__ = ["ReplicatedAccessStartup", "write_admin_token"]

log = structlog.get_logger("gpu_platform.server")

STEP_S = 0.2  # between attempts while no leader is known


def write_admin_token(settings: Settings, issued: IssuedToken) -> Path:
    """Write the bootstrap secret to <data_dir>/admin-token (0600), log and print it once."""
    path = settings.data_dir / "admin-token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(issued.secret + "\n")
    os.chmod(path, 0o600)
    log.warning(
        "bootstrap admin token created; it is shown once here and kept in the file",
        token_id=issued.info.token_id,
        file=str(path.resolve()),
    )
    print(f"admin token (shown once): {issued.secret}", file=sys.stderr, flush=True)
    return path


class ReplicatedAccessStartup:
    """Runs `ReplicatedAccessSetup.step` on a daemon thread until done or `stop()`."""

    def __init__(
        self,
        settings: Settings,
        access: AccessControl,
        store: ReplicatedAccessStore,
        legacy: AccessStore,
    ) -> None:
        self._settings = settings
        self._setup = ReplicatedAccessSetup(access, store, legacy)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="access-setup", daemon=True)

    def start(self) -> ReplicatedAccessStartup:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> bool:
        """Until the setup is done (True) or `timeout` seconds passed (False)."""
        self._thread.join(timeout=timeout)
        return not self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        told = False
        while not self._stop.is_set():
            try:
                step = self._setup.step()
            except Exception:  # a refused import must not end the server; say why
                log.exception("authentication setup failed; retrying")
                self._stop.wait(5.0)
                continue
            if step.imported:
                log.warning(
                    "tokens of this server's state.db imported into the replicated state",
                    tokens=step.imported,
                )
            if step.issued is not None:
                write_admin_token(self._settings, step.issued)
            if step.done:
                log.info("authentication on", tokens="replicated")
                return
            if step.waiting and not told:
                told = True
                log.warning(
                    "state.db holds tokens not yet in the cluster; they are imported when this "
                    "server leads (gpu-platform cluster transfer-leader)",
                    tokens=step.waiting,
                )
            self._stop.wait(STEP_S)
