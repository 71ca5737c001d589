"""Many simulated agents in one process, each with its own real gRPC stream to the leader.

    GPU_PLATFORM_CLUSTER_TOKEN=... python -m gpu_platform.testing.agent_swarm \
        --servers H:P[,H:P...] --nodes 128 [--profile dgx-a100] [--prefix node-] [--tick 0.05]
        [--ramp 64]

Each node is a simulated profile node running jobs on `FakeJobRunner` (held to the JobRunner
contract): `fake-exit CODE` ends at the next tick, `fake-forever` runs until stopped. All
streams share one event loop and one worker pool, so 128 nodes cost a few threads. Used by
the control-plane scale benchmark; prints `ready` once every agent is connected. It logs as
`gpu-platform agent` does, at `GPU_PLATFORM_LOG_LEVEL` in `GPU_PLATFORM_LOG_FORMAT` (unset:
info, auto), so a benchmark that runs its servers at `warning` runs its agents so too; and
over `GPU_PLATFORM_AGENT_TRANSPORT` (tcp unless set), the servers' `agent_transport`. `--ramp N`
dials N agents at a time, the next N once those are welcomed (or after 30 s): a thousand
agents dialling at once on a loaded machine wait past their welcome timeout and dial again,
over and over.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gpu_platform.adapters.inbound.agent_client import AgentClient
from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.application.agent import Agent
from gpu_platform.infrastructure.logging import configure_logging
from gpu_platform.testing.fakes import FakeJobRunner

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", required=True)
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--profile", default="dgx-a100")
    parser.add_argument("--prefix", default="node-")
    parser.add_argument("--tick", type=float, default=0.05)
    parser.add_argument("--ramp", type=int, default=0, help="agents dialled at a time (0 = all)")
    args = parser.parse_args(argv)
    servers = [s for s in args.servers.split(",") if s]
    token = os.environ.get("GPU_PLATFORM_CLUSTER_TOKEN")  # the cluster's (ReplicatedCluster's)
    transport = os.environ.get("GPU_PLATFORM_AGENT_TRANSPORT", "tcp")  # as the servers'
    level = os.environ.get("GPU_PLATFORM_LOG_LEVEL", "info")
    configure_logging(level, os.environ.get("GPU_PLATFORM_LOG_FORMAT", "auto"))  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="swarm-loop", daemon=True).start()
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="swarm")
    runners: list[FakeJobRunner] = []
    clients: list[AgentClient] = []
    for n in range(1, args.nodes + 1):
        runner = FakeJobRunner()
        agent = Agent(profile_node(args.profile, f"{args.prefix}{n}"), runner)
        client = AgentClient(agent, servers, loop=loop, pool=pool, token=token, transport=transport)
        runners.append(runner)
        clients.append(client)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    step = args.ramp or len(clients)
    for first in range(0, len(clients), step):
        if done.is_set():
            break
        batch = clients[first : first + step]
        for client in batch:
            client.start()
        deadline = time.monotonic() + 30.0
        while not all(c.connected_to for c in batch) and time.monotonic() < deadline:
            if done.wait(args.tick):
                break
            for runner in runners:
                runner.deliver()
    announced = False
    while not done.wait(args.tick):
        for runner in runners:
            runner.deliver()
        if not announced and all(c.connected_to for c in clients):
            print("ready", flush=True)
            announced = True
    for client in clients:
        client.stop()
    time.sleep(0.1)


if __name__ == "__main__":
    main()
