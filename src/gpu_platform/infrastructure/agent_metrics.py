"""An agent's `/metrics`: its GPUs under dcgm-exporter's names (labelled with the job and
tenant of the task on each GPU) and the agent's own series.

| series | kind | meaning |
|---|---|---|
| gpu_platform_agent_connected | gauge | 1 while a stream to the leader is up |
| gpu_platform_agent_streams_total | counter | streams opened (each leader change opens one) |
| gpu_platform_agent_tasks_running | gauge | tasks with a live process on this node |
| gpu_platform_agent_exits_unacknowledged | gauge | exits kept until a leader acknowledges them |
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_platform.adapters.inbound.agent_client import AgentClient
from gpu_platform.application.agent import Agent
from gpu_platform.domain.model.telemetry import TelemetrySnapshot
from gpu_platform.infrastructure.dcgm_metrics import DcgmCollector, GpuLabels, exposition

__all__ = ["agent_registry", "serve_agent_metrics"]


class _AgentCollector(Collector):
    def __init__(self, agent: Agent, client: AgentClient) -> None:
        self._agent = agent
        self._client = client

    def collect(self) -> Iterator[Any]:
        node = self._agent.node.name
        connected = GaugeMetricFamily(
            "gpu_platform_agent_connected", "1 while a stream to the leader is up", labels=["node"]
        )
        connected.add_metric([node], 1.0 if self._client.connected_to else 0.0)
        streams = CounterMetricFamily(
            "gpu_platform_agent_streams", "Streams to a leader opened", labels=["node"]
        )
        streams.add_metric([node], float(self._client.streams))
        running = GaugeMetricFamily(
            "gpu_platform_agent_tasks_running", "Tasks with a live process", labels=["node"]
        )
        running.add_metric([node], float(self._agent.running()))
        unacked = GaugeMetricFamily(
            "gpu_platform_agent_exits_unacknowledged",
            "Task exits kept until a leader acknowledges them",
            labels=["node"],
        )
        unacked.add_metric([node], float(self._agent.unacked()))
        yield from (connected, streams, running, unacked)


def agent_registry(
    agent: Agent,
    client: AgentClient,
    telemetry: Callable[[], TelemetrySnapshot | None] | None,
) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(_AgentCollector(agent, client))
    if telemetry is not None:
        node = agent.node

        def labels() -> dict[tuple[str, int], GpuLabels]:
            held = agent.sharers()  # a shared GPU: one series per sharer
            out = {}
            for g in node.gpus:
                tasks = held.get(g.index, ())
                first = tasks[0] if tasks else ("", "")
                sharers = tasks if len(tasks) > 1 else ()
                out[(node.name, g.index)] = GpuLabels(g.model, g.pci_bus_id, *first, sharers)
            return out

        registry.register(DcgmCollector(telemetry, labels, hostname=node.name))
    return registry


def serve_agent_metrics(
    registry: CollectorRegistry, host: str, port: int, *, token: str | None = None
) -> int:
    """Serve `registry` on http://host:port/metrics from a daemon thread; returns the port.

    With `token`, a scrape must send `Authorization: Bearer <token>` (401 otherwise): the
    series carry job ids and tenants (settings.agent_metrics_token_file)."""
    body = registry
    expected = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/", "/metrics"):
                self.send_error(404)
                return
            if expected is not None:
                sent = (self.headers.get("Authorization") or "").encode()
                if not hmac.compare_digest(sent, expected):
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Bearer realm="agent metrics"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            data = exposition(body)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes are not worth a log line

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="agent-metrics", daemon=True).start()
    return int(server.server_port)
