"""A launch an agent reads after its lease has ended is refused, not started.

The chaos scenario `control_plane.mixed_faults` once saw one job's two attempts alive together:
the leader sent a launch to an agent just before it was frozen (SIGSTOP); the node went DOWN,
the job was re-queued and started elsewhere; on SIGCONT the agent read the stale launch from
its socket and started the old attempt, which ran until the fencer's next poll killed it. The
runner now checks the lease right before it starts a task, and the leader re-queues the job on
that refusal (no fault of the job) rather than failing it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.process.fence import ProcessLeaseFence
from gpu_platform.adapters.outbound.process.runner import ProcessJobRunner
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub, AgentUnavailable
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.ports.outbound.node_lease import LEASE_ENDED
from gpu_platform.testing.agent_fakes import AcceptingListener, connect
from gpu_platform.testing.overlap import live_attempts

SLEEP = "import time; time.sleep(600)  # stale-launch-test"


def spec(job_id: str, node: str = "") -> LaunchSpec:
    return LaunchSpec(
        job_id=job_id,
        epoch=78,
        attempt=1,
        argv=(sys.executable, "-c", SLEEP),
        env=(),
        gpu_indices=(),
        gpu_uuids=(),
        node=node,
    )


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessJobRunner]:
    root = tmp_path_factory.mktemp("stale")
    fence = ProcessLeaseFence(root / "fence", grace_s=0.5)
    r = ProcessJobRunner(root / "jobs", base_env={"PATH": os.environ["PATH"]}, fence=fence)
    yield r
    r.close(grace_s=1)


def test_a_runner_whose_lease_has_ended_refuses_to_start_a_task(
    runner: ProcessJobRunner,
) -> None:
    assert runner.fence is not None
    runner.fence.renew(time.monotonic() - 1.0)  # the agent was frozen past its lease
    exits: list[ExitReport] = []
    with pytest.raises(LaunchError, match=LEASE_ENDED):
        runner.start(spec("j-stale"), exits.append)
    assert "j-stale" not in live_attempts(b"stale-launch-test")
    assert runner.stop("j-stale", 78, 0) is False


def test_a_runner_under_a_live_lease_starts_the_task(runner: ProcessJobRunner) -> None:
    assert runner.fence is not None
    runner.fence.renew(time.monotonic() + 600)
    runner.start(spec("j-live"), lambda report: None)
    assert runner.stop("j-live", 78, 0) is True  # it was running


def test_the_leader_requeues_a_job_whose_launch_the_agent_refused_for_its_ended_lease(
    runner: ProcessJobRunner, inventory: Inventory
) -> None:
    assert runner.fence is not None
    node = inventory.nodes[0]
    hub = AgentHub()
    hub.attach(AcceptingListener())
    connect(hub, Agent(node, runner, lease=runner.fence))
    runner.fence.renew(time.monotonic() - 1.0)
    with pytest.raises(AgentUnavailable, match=LEASE_ENDED):  # re-queued, not failed
        hub.start(spec("j-hub", node.name), lambda report: None)
    assert "j-hub" not in live_attempts(b"stale-launch-test")


def test_a_lease_that_lapsed_after_a_launch_was_asked_for_refuses_it_even_once_renewed(
    tmp_path: Path,
) -> None:
    fence = ProcessLeaseFence(tmp_path / "fence", grace_s=0.5)
    try:
        assert not fence.ended()  # never granted: nothing is fenced
        asked = time.monotonic()
        fence.renew(asked)  # ends at once: the agent froze with the launch queued
        assert fence.ended(since=asked)
        fence.renew(time.monotonic() + 600)  # a new leader welcomed it after the resume
        assert not fence.ended()
        assert fence.ended(since=asked)
        assert not fence.ended(since=time.monotonic())  # a launch asked for now may start
    finally:
        fence.close()
