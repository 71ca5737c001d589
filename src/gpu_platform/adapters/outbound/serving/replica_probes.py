"""`ReplicaProbes`: gives each service replica a port and health-checks it, on its node.

A JobRunner decorator: the node's agent runs every task through it, and starts its
`monitor` (a HealthMonitor) with its other monitors. A task whose environment names a service
(`GPU_PLATFORM_SERVICE`, set by the control plane for replica jobs) gets a free TCP port of
this host in the variable the service names (`GPU_PLATFORM_PORT_ENV`, e.g. PORT); `${PORT}`
in its argv is replaced by the port too. While it runs, a probe thread sends
`GET http://127.0.0.1:PORT<health path>` every `interval_s` (timeout `timeout_s`): a 2xx
answer is ready, anything else (refused, timeout, 503) is not ready, with the reason. Each
change is reported to the sink as a `ReplicaProbe` (address `http://HOST:PORT`, with `host`
the node's address), so the leader learns readiness, liveness and where the replica listens.

Other tasks pass through untouched. Thread-safe.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from gpu_platform.domain.faults.health import ReplicaProbe
from gpu_platform.domain.services.reconcile import ENV_HEALTH, ENV_PORT, ENV_SERVICE
from gpu_platform.ports.outbound.health_monitor import HealthMonitor, HealthSink
from gpu_platform.ports.outbound.job_runner import (
    ExitReport,
    JobRunner,
    JobRunnerWrapper,
    LaunchSpec,
)

__all__ = ["ReplicaProbes", "free_port"]

log = structlog.get_logger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(slots=True)
class _Target:
    job_id: str
    epoch: int
    port: int
    path: str
    ready: bool | None = None  # None: not probed yet
    detail: str = ""


class ReplicaProbes(JobRunnerWrapper):
    """See the module docstring."""

    def __init__(
        self,
        inner: JobRunner,
        node: str,
        *,
        host: str = "127.0.0.1",
        interval_s: float = 0.5,
        timeout_s: float = 2.0,
    ) -> None:
        super().__init__(inner)
        self._node = node
        self._host = host
        self._interval = interval_s
        self._timeout = timeout_s
        self._lock = threading.Lock()
        self._targets: dict[tuple[str, int], _Target] = {}
        self._sink: HealthSink | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __getattr__(self, name: str) -> object:  # fence, containers, ... of the runner
        return getattr(self._inner, name)

    @property
    def monitor(self) -> HealthMonitor:
        """The HealthMonitor that probes this runner's replicas (start it with the others)."""
        return _ProbeMonitor(self)

    def _start_probing(self, sink: HealthSink) -> None:
        self._sink = sink
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="replica-probes", daemon=True)
        self._thread.start()

    def _stop_probing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- JobRunner ---------------------------------------------------------------------------

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        env = dict(spec.env)
        if ENV_SERVICE not in env or spec.rank != 0:
            self._inner.start(spec, on_exit)
            return
        port_env, path = env.get(ENV_PORT, "PORT"), env.get(ENV_HEALTH, "/health")
        port = free_port()
        token = "${" + port_env + "}"
        argv = tuple(a.replace(token, str(port)) for a in spec.argv)
        spec = replace(spec, argv=argv, env=(*spec.env, (port_env, str(port))))
        key = (spec.job_id, spec.epoch)

        def exited(report: ExitReport) -> None:
            with self._lock:
                self._targets.pop(key, None)
            on_exit(report)

        with self._lock:
            self._targets[key] = _Target(spec.job_id, spec.epoch, port, path)
        try:
            self._inner.start(spec, exited)
        except Exception:
            with self._lock:
                self._targets.pop(key, None)
            raise
        log.info("replica started", job_id=spec.job_id, port=port, service=env[ENV_SERVICE])

    # -- probing -----------------------------------------------------------------------------

    def probe_once(self) -> None:
        """Probe every replica once and report the changes (the loop's body)."""
        with self._lock:
            targets = list(self._targets.values())
        for target in targets:
            ready, detail = self._check(target)
            if ready == target.ready and detail == target.detail:
                continue
            target.ready, target.detail = ready, detail
            with self._lock:
                current = self._targets.get((target.job_id, target.epoch)) is target
            sink = self._sink
            if current and sink is not None:
                address = f"http://{self._host}:{target.port}"
                sink(ReplicaProbe(self._node, target.job_id, target.epoch, ready, address, detail))

    def _check(self, target: _Target) -> tuple[bool, str]:
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=self._timeout)
        try:
            conn.request("GET", target.path)
            status = conn.getresponse().status
        except (OSError, http.client.HTTPException) as exc:
            return False, f"GET {target.path}: {exc.__class__.__name__}: {exc}"
        finally:
            conn.close()
        if 200 <= status < 300:
            return True, ""
        return False, f"GET {target.path}: HTTP {status}"

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.probe_once()
            except Exception:  # a probe must never end the loop
                log.exception("replica probe failed")


class _ProbeMonitor:
    """`ReplicaProbes.monitor`: starting it starts the probe loop."""

    def __init__(self, probes: ReplicaProbes) -> None:
        self._probes = probes

    def start(self, sink: HealthSink) -> None:
        self._probes._start_probing(sink)

    def stop(self) -> None:
        self._probes._stop_probing()
