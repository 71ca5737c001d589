"""`QuorumContact`, the condition under which a leader renews its agents' leases: a quorum of
voters sent it a message of its term within one election timeout. The fence budget
(`Settings.fence_budget_seconds`) counts on its bound: a leader for which it holds at time t
was not superseded before t - W - (a message's flight). Checked on the real Raft core over
the deterministic chaos network (`testing.raft_network`), with partitions, delays, drops and
the link-closing rule (a follower whose leader's link closed campaigns at once)."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.application.raft_contact import QuorumContact
from gpu_platform.domain.consensus import Message, MessageType, Role
from gpu_platform.infrastructure.config import fence_budget_s, load_settings
from gpu_platform.testing.raft_network import Faults, NodeOptions, RaftNetwork

MT = MessageType
ELECTION = 10  # ticks: W, the renewal window, is one election timeout
MAX_DELAY = 2  # ticks a message may spend in flight


class StampedNetwork(RaftNetwork):
    """A RaftNetwork whose every delivered message is stamped on its receiver's contact (the
    clock is the network's tick), as `RaftNode` stamps what its transport receives."""

    def __init__(self, ids: Iterable[int], seed: int, faults: Faults) -> None:
        voters = tuple(ids)
        options = NodeOptions(election_tick=ELECTION, lean_replication=True)
        super().__init__(voters, seed, faults=faults, options=options)
        self.voters = voters
        self.contacts = {i: QuorumContact(i, clock=lambda: self.now) for i in voters}
        self.became: dict[int, int] = {}  # term -> first tick a leader of it was seen
        self.renewals: list[tuple[int, int]] = []  # (tick, term): a leader that would renew

    def _deliver(self, m: Message, lost: bool) -> None:
        dest = self.nodes.get(m.to)
        if not lost and dest is not None and dest.alive and self.connected(m.from_, m.to):
            self.contacts[m.to].heard(m)
        super()._deliver(m, lost)

    def close_link(self, follower: int) -> None:
        """`follower`'s transport reports its leader's link closed (UNREACHABLE)."""
        r = self.nodes[follower].node.raft
        if r.state is Role.FOLLOWER and r.lead:
            lead = r.lead
            self.call(follower, lambda rn: rn.raft.step(Message(MT.UNREACHABLE, from_=lead)))

    def observe(self) -> None:
        for n in self.live():
            r = n.node.raft
            if r.state is Role.LEADER:
                self.became.setdefault(r.term, self.now)
                if self.contacts[n.id].fresh(r.term, self.voters, ELECTION):
                    self.renewals.append((self.now, r.term))

    def superseded_too_long(self) -> list[tuple[int, int, int, int]]:
        """(tick, term, newer term, its start) where a leader would renew although a newer
        leader had taken the lead more than W + a flight before."""
        return [
            (t, term, newer, start)
            for t, term in self.renewals
            for newer, start in self.became.items()
            if newer > term and start <= t and t - start > ELECTION + MAX_DELAY
        ]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _answer(src: int, term: int, kind: MT = MT.HEARTBEAT_RESP) -> Message:
    return Message(kind, to=1, from_=src, term=term)


def test_a_sole_voter_is_always_in_contact_with_its_quorum() -> None:
    assert QuorumContact(1).fresh(4, (1,), 0.5)


def test_a_quorum_needs_a_majority_of_answers_of_the_leaders_term_within_the_window() -> None:
    clock = _Clock()
    c = QuorumContact(1, clock=clock)
    assert not c.fresh(3, (1, 2, 3), 0.5)  # the leader alone is no majority of three
    c.heard(_answer(2, 3))
    assert c.fresh(3, (1, 2, 3), 0.5)
    clock.now = 0.6
    assert not c.fresh(3, (1, 2, 3), 0.5)  # that answer is older than the window
    c.heard(_answer(3, 3, MT.APP_RESP))
    assert c.fresh(3, (1, 2, 3), 0.5)
    assert not c.fresh(3, (1, 2, 3, 4, 5), 0.5)  # two of five


def test_only_messages_that_carry_their_senders_own_term_count() -> None:
    c = QuorumContact(1)
    c.heard(_answer(2, 4))  # 2 has moved on to term 4: it may have voted for another leader
    assert not c.fresh(3, (1, 2, 3), 0.5)
    c.heard(_answer(3, 3, MT.PRE_VOTE_RESP))  # a pre-vote's term is one its sender has not reached
    assert not c.fresh(3, (1, 2, 3), 0.5)
    c.heard(_answer(3, 3, MT.VOTE_RESP))  # the vote that made 1 leader of term 3
    assert c.fresh(3, (1, 2, 3), 0.5)


def test_being_leader_alone_would_renew_leases_long_after_a_newer_leader_took_over() -> None:
    """Why the condition exists: a leader cut off just after its check-quorum keeps the role
    for two election timeouts, while followers whose link to it closed elect another at once."""
    net = StampedNetwork((1, 2, 3), seed=1, faults=Faults())
    net.run_until(lambda: net.leader() is not None, 100)
    old = net.leader()
    assert old is not None
    r = net.nodes[old].node.raft
    net.run_until(lambda: r.election_elapsed == 0, 2 * ELECTION)  # a check has just passed
    net.tick()  # the followers answer once more after it
    net.isolate(old)
    for f in (1, 2, 3):
        if f != old:
            net.close_link(f)
    leading_since_newer = 0
    for _ in range(3 * ELECTION):
        net.tick()
        net.observe()
        newer = [start for term, start in net.became.items() if term > r.term]
        if r.state is Role.LEADER and newer:
            leading_since_newer = net.now - min(newer)
    assert leading_since_newer > ELECTION + MAX_DELAY  # the role outlives the window by far
    assert net.superseded_too_long() == []  # the quorum contact does not


_ACTIONS = st.one_of(
    st.tuples(st.just("tick"), st.integers(1, 2 * ELECTION)),
    st.tuples(st.just("isolate"), st.integers(1, 5)),
    st.tuples(st.just("split"), st.integers(1, 5)),
    st.tuples(st.just("close"), st.integers(1, 5)),
    st.tuples(st.just("heal"), st.just(0)),
)


@settings(max_examples=40, deadline=None)
@given(
    size=st.sampled_from([3, 5]),
    seed=st.integers(0, 2**16),
    drop=st.sampled_from([0.0, 0.05, 0.2]),
    actions=st.lists(_ACTIONS, min_size=4, max_size=16),
)
def test_a_leader_in_contact_with_its_quorum_was_never_superseded_for_longer_than_the_window(
    size: int, seed: int, drop: float, actions: list[tuple[str, int]]
) -> None:
    net = StampedNetwork(range(1, size + 1), seed, Faults(drop=drop, max_delay=MAX_DELAY))
    for kind, arg in actions:
        node = (arg - 1) % size + 1
        if kind == "tick":
            for _ in range(arg):
                net.tick()
                net.observe()
        elif kind == "isolate":
            net.isolate(node)
        elif kind == "split":
            net.partition(range(1, node + 1), range(node + 1, size + 1))
        elif kind == "close":
            net.close_link(node)
        else:
            net.heal()
    for _ in range(3 * ELECTION):
        net.tick()
        net.observe()
    assert net.superseded_too_long() == []


@settings(max_examples=60, deadline=None)
@given(
    tick_ms=st.integers(1, 200),
    election_ticks=st.integers(2, 20),
    lease=st.floats(0.1, 30),
    grace=st.floats(0.1, 10),
    suspect=st.floats(0.5, 30),
)
def test_the_fence_budget_covers_the_renewal_window_the_lease_and_the_fence(
    tick_ms: int, election_ticks: int, lease: float, grace: float, suspect: float
) -> None:
    """A newer leader re-places a silent node's work node_down_after after it took the lead;
    the old leader's last renewal (within W of then, W the window the server wires) lasts a
    lease, and the fence kills a grace later: the budget must cover all three, plus slack
    for the message's flight and the fencer's 50 ms poll."""
    down = fence_budget_s(
        lease_s=lease, grace_s=grace, suspect_s=suspect, election_s=tick_ms / 1000 * election_ticks
    )
    s = load_settings(
        raft_tick_seconds=tick_ms / 1000,
        raft_election_ticks=election_ticks,
        agent_lease_seconds=lease,
        agent_fence_grace_seconds=grace,
        agent_heartbeat_seconds=min(suspect, lease) / 2,
        node_suspect_after_seconds=suspect,
        node_down_after_seconds=max(down, suspect + 0.01),
    )
    assert s.fence_budget_seconds == down
    fenced_by = s.lease_renewal_window_seconds + lease + 0.1 + grace + 0.05
    assert s.fence_budget_seconds >= fenced_by + 0.5  # half a second of it is slack at least
