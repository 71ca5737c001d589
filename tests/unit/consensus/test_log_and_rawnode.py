"""The Raft log as a stateful structure, and the RawNode Ready contract."""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpu_platform.domain.consensus.errors import CompactedError
from gpu_platform.domain.consensus.log import RaftLog
from gpu_platform.domain.consensus.raft import Config
from gpu_platform.domain.consensus.rawnode import RawNode, bootstrap
from gpu_platform.domain.consensus.storage import MemoryStorage
from gpu_platform.domain.consensus.types import (
    ConfChange,
    ConfState,
    Entry,
    Message,
    MessageType,
    Role,
)

MT = MessageType


class LogMachine(RuleBasedStateMachine):
    """Append, overwrite, commit, persist, apply and compact in random orders; the log keeps
    its invariants and agrees with a plain list model."""

    def __init__(self) -> None:
        super().__init__()
        self.storage = MemoryStorage(ConfState(voters=(1,)))
        self.log = RaftLog(self.storage)
        self.model: list[int] = []  # terms of entries 1..n
        self.term = 1

    @rule(n=st.integers(1, 4), bump=st.booleans())
    def append(self, n: int, bump: bool) -> None:
        self.term += int(bump)
        last = self.log.last_index()
        self.log.append([Entry(self.term, last + 1 + i) for i in range(n)])
        self.model += [self.term] * n

    @rule(back=st.integers(0, 4), n=st.integers(1, 3))
    def overwrite_uncommitted_suffix(self, back: int, n: int) -> None:
        at = max(self.log.committed + 1, self.log.last_index() - back)
        self.term += 1
        ents = tuple(Entry(self.term, at + i) for i in range(n))
        prev_term = self.log.term(at - 1) if at - 1 >= self.log.first_index() - 1 else None
        if prev_term is None:
            return
        assert self.log.maybe_append(at - 1, prev_term, self.log.committed, ents) == at + n - 1
        self.model = self.model[: at - 1] + [self.term] * n

    @rule(k=st.integers(0, 5))
    def commit(self, k: int) -> None:
        self.log.commit_to(min(self.log.last_index(), self.log.committed + k))

    @rule()
    def persist(self) -> None:
        ents = self.log.unstable_entries()
        if ents:
            self.storage.append(ents)
            self.log.stable_to(ents[-1].index, ents[-1].term)

    @rule()
    def apply(self) -> None:
        ents = self.log.next_ents()
        if ents:
            self.log.applied_to(ents[-1].index)

    @rule()
    def compact(self) -> None:
        # A host compacts what it applied, and applies only after persisting the Ready that
        # carried those entries: never past an entry still unstable (its stored copy may be
        # an overwritten one).
        stable = self.log.unstable.offset - 1 if self.log.unstable.entries else self.log.applied
        target = min(self.log.applied, self.storage.last_index(), stable)
        if target > self.storage.first_index():
            self.storage.compact(target)

    @invariant()
    def invariants_hold_and_terms_match_the_model(self) -> None:
        self.log.check_invariants()
        assert self.log.last_index() == len(self.model)
        for i in range(self.log.first_index(), self.log.last_index() + 1):
            assert self.log.term(i) == self.model[i - 1]

    @invariant()
    def compacted_entries_are_reported_as_such(self) -> None:
        first = self.log.first_index()
        if first > 2:
            try:
                self.log.slice(first - 1, first)
            except CompactedError:
                return
            raise AssertionError("reading below first_index must raise CompactedError")


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


def node(node_id: int = 1, voters: tuple[int, ...] = (1, 2, 3)) -> tuple[RawNode, MemoryStorage]:
    st_ = MemoryStorage()
    bootstrap(st_, voters)
    return RawNode(Config(id=node_id), st_, random.Random(node_id)), st_


def test_a_vote_is_sent_only_in_a_ready_that_also_persists_it() -> None:
    rn, _ = node(2)
    rn.step(Message(MT.VOTE, 2, 1, term=2, log_term=1, index=1))
    rd = rn.ready()
    (resp,) = rd.messages
    assert resp.type is MT.VOTE_RESP and not resp.reject
    assert rd.hard_state is not None and rd.hard_state.vote == 1 and rd.hard_state.term == 2
    assert rd.must_sync


def test_appended_entries_are_acknowledged_in_the_ready_that_persists_them() -> None:
    rn, _ = node(2)
    rn.step(Message(MT.APP, 2, 1, term=2, log_term=1, index=1, entries=(Entry(2, 2, data=b"a"),)))
    rd = rn.ready()
    assert [e.index for e in rd.entries_to_persist] == [2]
    assert [m.index for m in rd.messages if m.type is MT.APP_RESP] == [2]


def test_a_single_node_commits_its_own_proposal_and_hands_it_over_to_apply() -> None:
    rn, storage = node(1, (1,))
    rn.campaign()
    assert rn.status().soft_state.role is Role.LEADER
    rn.propose(b"hello")
    applied: list[bytes] = []
    while rn.has_ready():
        rd = rn.ready()
        storage.append(rd.entries_to_persist)
        if rd.hard_state is not None:
            storage.set_hard_state(rd.hard_state)
        applied += [e.data for e in rd.committed_entries if e.data]
        rn.advance(rd)
    assert applied == [b"hello"]
    assert rn.status().applied == storage.last_index()
    assert not rn.has_ready()


def test_the_soft_state_appears_in_a_ready_only_when_it_changed() -> None:
    rn, storage = node(1, (1,))
    rn.campaign()
    rd = rn.ready()
    assert rd.soft_state is not None and rd.soft_state.role is Role.LEADER
    storage.append(rd.entries_to_persist)
    rn.advance(rd)
    rn.propose(b"x")
    assert rn.ready().soft_state is None


def test_local_message_types_cannot_be_stepped_from_the_network() -> None:
    import pytest

    from gpu_platform.domain.consensus.errors import StepError

    rn, _ = node()
    with pytest.raises(StepError):
        rn.step(Message(MT.HUP, 1, 1))


def test_conf_changes_survive_the_entry_encoding() -> None:
    from gpu_platform.domain.consensus.types import (
        ConfChangeSingle,
        ConfChangeTransition,
        ConfChangeType,
    )

    cc = ConfChange(
        (
            ConfChangeSingle(ConfChangeType.ADD_NODE, 4),
            ConfChangeSingle(ConfChangeType.REMOVE_NODE, 1),
        ),
        ConfChangeTransition.EXPLICIT,
        b"\x00ctx",
    )
    assert ConfChange.decode(cc.encode()) == cc
    assert cc.enter_joint() == (True, False)
    assert ConfChange().leave_joint()


def test_a_driver_must_advance_each_ready_before_taking_the_next() -> None:
    import pytest

    from gpu_platform.domain.consensus.errors import StepError

    rn, storage = node(1, (1,))
    rn.campaign()
    rd = rn.ready()
    with pytest.raises(StepError):
        rn.ready()
    storage.append(rd.entries_to_persist)
    rn.advance(rd)
    with pytest.raises(StepError):
        rn.advance(rd)


def test_a_learner_still_votes_when_asked_since_it_may_be_a_voter_in_a_newer_config() -> None:
    st_ = MemoryStorage(ConfState(voters=(1, 2), learners=(3,)))
    rn = RawNode(Config(id=3), st_, random.Random(3))
    rn.step(Message(MT.VOTE, 3, 1, term=2, log_term=0, index=0))
    (resp,) = rn.ready().messages
    assert resp.type is MT.VOTE_RESP and not resp.reject
