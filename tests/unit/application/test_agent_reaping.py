"""An agent told to stop an attempt it does not run reaps what an earlier agent left."""

from __future__ import annotations

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.agent import Agent
from gpu_platform.testing.fakes import FakeJobRunner


def test_stopping_an_unknown_attempt_reaps_its_leftovers() -> None:
    runner = FakeJobRunner()
    runner.orphans.add(("j-old", 4))  # processes of an attempt started before a crash
    agent = Agent(default_node(), runner)
    agent.stop_attempt("j-old", 4, 0.0)
    assert runner.orphans == set()


def test_only_the_named_attempts_leftovers_are_reaped() -> None:
    runner = FakeJobRunner()
    runner.orphans.add(("j-1", 1))
    agent = Agent(default_node(), runner)
    agent.stop_attempt("j-2", 1, 0.0)
    assert runner.orphans == {("j-1", 1)}
