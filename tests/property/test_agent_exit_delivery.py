"""Every exit reaches a leader, whatever the interleaving of an agent's streams and its tasks.

A model of one agent's link (a hypothesis state machine over the real `Agent` and the
in-memory runner): a stream is dialled (the hello is taken), welcomed (`Agent.bind`), its
messages are taken (acknowledged), refused (the server lost the lead: the hub ends the
stream) or lost with a broken stream, while tasks start and end at any point. Once the link
is left to settle, every task that ended has had its exit taken by a server, and the agent
keeps none unacknowledged: no job is left RUNNING for an exit that never arrived.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.agent import Agent, AgentHello, ExitNotice, Outgoing
from gpu_platform.ports.outbound.job_runner import LaunchSpec
from gpu_platform.testing.fakes import FakeJobRunner


class ExitDelivery(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runner = FakeJobRunner()
        self.agent = Agent(default_node(), self.runner)
        self.ids = itertools.count(1)
        self.ended: set[str] = set()  # tasks whose process ended
        self.taken: set[str] = set()  # exits a server took (and acknowledged)
        self.hello: AgentHello | None = None  # the stream being opened
        self.up = False
        self.wire: list[ExitNotice] = []  # sent on the stream that is up, not yet read

    # -- the stream ----------------------------------------------------------------------------

    def _take(self, seqs_and_jobs: list[tuple[int, str]]) -> None:
        for seq, job in seqs_and_jobs:
            self.taken.add(job)
            self.agent.ack(seq)

    def _emit(self, item: Outgoing) -> bool:
        if isinstance(item, ExitNotice):
            self.wire.append(item)
        return True

    def _drop(self) -> None:
        self.agent.bind(None)
        self.hello, self.up, self.wire = None, False, []

    @precondition(lambda self: self.hello is None and not self.up)
    @rule()
    def dial(self) -> None:
        self.hello = self.agent.hello()

    @precondition(lambda self: self.hello is not None)
    @rule()
    def welcome(self) -> None:
        """The server took the hello's exits, then welcomed the agent."""
        assert self.hello is not None
        self._take([(e.seq, e.report.job_id) for e in self.hello.exited])
        self.agent.bind(self._emit, self.hello)
        self.hello, self.up = None, True

    @precondition(lambda self: self.up and bool(self.wire))
    @rule()
    def take(self) -> None:
        notice = self.wire.pop(0)
        self._take([(notice.seq, notice.report.job_id)])

    @precondition(lambda self: self.up and bool(self.wire))
    @rule()
    def refuse(self) -> None:
        """The server lost the lead mid-commit: it ends the stream, acknowledging nothing."""
        self._drop()

    @precondition(lambda self: self.hello is not None or self.up)
    @rule()
    def break_stream(self) -> None:
        self._drop()

    # -- tasks ---------------------------------------------------------------------------------

    @rule()
    def launch(self) -> None:
        job = f"j{next(self.ids)}"
        spec = LaunchSpec(job, 1, 1, ("fake-forever",), (), (), (), node=self.agent.node.name)
        assert self.agent.launch(spec) == ""

    @precondition(lambda self: bool(self.runner.live()))
    @rule(data=st.data())
    def end(self, data: st.DataObject) -> None:
        spec = data.draw(st.sampled_from(sorted(self.runner.live(), key=lambda s: s.job_id)))
        self.runner.finish(spec.job_id, 0)
        self.runner.deliver()
        self.ended.add(spec.job_id)

    def teardown(self) -> None:
        """Left alone, the link settles: dialled, welcomed, every message read."""
        if not self.up:
            if self.hello is None:
                self.dial()
            self.welcome()
        while self.wire:
            self.take()
        assert self.ended <= self.taken, f"exits never taken: {sorted(self.ended - self.taken)}"
        assert self.agent.unacked() == 0


ExitDelivery.TestCase.settings = settings(max_examples=60, stateful_step_count=20, deadline=None)
test_every_exit_reaches_a_server_whatever_the_interleaving = ExitDelivery.TestCase
