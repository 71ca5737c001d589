"""Raft safety and liveness over random schedules on the deterministic chaos network.

Every schedule mixes message drops, duplicates, delays (reordering), partitions, crashes and
restarts, proposals, leader transfers and reads. The network checks election safety, leader
completeness and state-machine safety after every tick (`RaftNetwork.check_invariants`);
log matching is checked at the end. Then the network heals and we require liveness: a leader
within a bounded number of ticks and a proposal committed on every node soon after.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpu_platform.domain.consensus.types import (
    ConfChange,
    ConfChangeSingle,
    ConfChangeType,
    Role,
)
from gpu_platform.testing.raft_network import Faults, NodeOptions, RaftNetwork, SimNode

LIVENESS_ELECTION_TICKS = 300  # >> 2 * election_tick * a few split votes
LIVENESS_COMMIT_TICKS = 50


@dataclass(frozen=True)
class Action:
    kind: str
    node: int = 0
    count: int = 1
    group: frozenset[int] = frozenset()


def actions(n: int) -> st.SearchStrategy[Action]:
    node = st.integers(1, n)
    return st.one_of(
        st.builds(Action, st.just("tick"), count=st.integers(1, 25)),
        st.builds(Action, st.just("propose"), node=node, count=st.integers(1, 4)),
        st.builds(
            Action, st.just("partition"), group=st.frozensets(node, min_size=1, max_size=n - 1)
        ),
        st.builds(Action, st.just("heal")),
        st.builds(Action, st.just("crash"), node=node),
        st.builds(Action, st.just("restart"), node=node),
        st.builds(Action, st.just("transfer"), node=node),
        st.builds(Action, st.just("read"), node=node),
    )


def membership_actions(n: int) -> st.SearchStrategy[Action]:
    """Add a voter or learner (possibly a brand-new node), remove one, or swap two at once."""
    node = st.integers(1, n + 2)
    return st.one_of(
        st.builds(Action, st.just("add_voter"), node=node),
        st.builds(Action, st.just("add_learner"), node=node),
        st.builds(Action, st.just("remove"), node=node),
        st.builds(Action, st.just("swap"), node=node, count=st.integers(1, n + 2)),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, int, Faults, NodeOptions, list[Action]]:
    n = draw(st.sampled_from([3, 5]))
    seed = draw(st.integers(0, 2**32 - 1))
    faults = Faults(
        drop=draw(st.sampled_from([0.0, 0.05, 0.2])),
        duplicate=draw(st.sampled_from([0.0, 0.1])),
        max_delay=draw(st.integers(0, 3)),
    )
    options = NodeOptions(
        pre_vote=draw(st.booleans()),
        check_quorum=draw(st.booleans()),
        max_inflight_msgs=draw(st.sampled_from([1, 4, 256])),
        max_size_per_msg=draw(st.sampled_from([0, 64, 1 << 20])),
        snapshot_every=draw(st.sampled_from([0, 5])),
        lean_replication=draw(st.booleans()),
    )
    return n, seed, faults, options, draw(st.lists(actions(n), max_size=30))


@st.composite
def reconfiguration_scenarios(
    draw: st.DrawFn,
) -> tuple[int, int, Faults, NodeOptions, list[Action]]:
    """As `scenarios`, plus membership changes; pre-vote and check-quorum on, so that a
    removed node that never learnt of its removal cannot depose leaders forever."""
    n, seed, faults, options, plan = draw(scenarios())
    options = replace(options, pre_vote=True, check_quorum=True)
    extra = draw(st.lists(st.tuples(st.integers(0, len(plan)), membership_actions(n)), max_size=6))
    for pos, a in sorted(extra, key=lambda x: -x[0]):
        plan.insert(pos, a)
    return n, seed, faults, options, plan


def _reconfigure(net: RaftNetwork, a: Action) -> None:
    if a.kind in ("add_voter", "add_learner", "swap") and a.node not in net.nodes:
        net.add_node(a.node)
    add = ConfChangeType.ADD_NODE if a.kind != "add_learner" else ConfChangeType.ADD_LEARNER_NODE
    if a.kind == "remove":
        changes = [ConfChangeSingle(ConfChangeType.REMOVE_NODE, a.node)]
    elif a.kind == "swap":  # two voter changes at once: joint consensus
        changes = [
            ConfChangeSingle(add, a.node),
            ConfChangeSingle(ConfChangeType.REMOVE_NODE, a.count),
        ]
    else:
        changes = [ConfChangeSingle(add, a.node)]
    net.propose_conf_change(ConfChange(tuple(changes)))


def perform(net: RaftNetwork, a: Action, counter: list[int]) -> None:
    node = net.nodes.get(a.node)
    if a.kind in ("add_voter", "add_learner", "remove", "swap"):
        _reconfigure(net, a)
        return
    if a.kind == "tick":
        net.run(a.count)
    elif a.kind == "propose" and node is not None and node.alive:
        for _ in range(a.count):
            counter[0] += 1
            net.propose(b"v%d" % counter[0], via=a.node)
    elif a.kind == "partition":
        net.partition(a.group, [i for i in net.nodes if i not in a.group])
    elif a.kind == "heal":
        net.heal()
    elif a.kind == "crash" and node is not None and node.alive:
        net.crash(a.node)
    elif a.kind == "restart" and node is not None and not node.alive:
        net.restart(a.node)
    elif a.kind == "transfer":
        lead = net.leader()
        if lead is not None and a.node != lead:
            net.call(lead, lambda rn: rn.transfer_leader(a.node))
    elif a.kind == "read" and node is not None and node.alive:
        counter[0] += 1
        net.read(a.node, b"r%d" % counter[0])


def heal_and_require_liveness(net: RaftNetwork) -> None:
    net.heal()
    net.faults = Faults()
    for i, node in sorted(net.nodes.items()):
        if not node.alive:
            net.restart(i)

    def members() -> list[SimNode]:
        lead = net.leader()
        if lead is None:
            return list(net.nodes.values())
        ids = net.nodes[lead].node.raft.prs.progress
        return [n for i, n in net.nodes.items() if i in ids]

    took = net.run_until(lambda: net.leader() is not None, LIVENESS_ELECTION_TICKS)
    assert took is not None, f"no leader {LIVENESS_ELECTION_TICKS} ticks after healing"
    # A proposal can be refused for a while (a leader transfer in flight, a leader deposed
    # by a higher term): retry every tick, within the same bound. Nodes may learn the entry
    # through a snapshot, so "applied" is judged by index, and the entry by `entry_at`.
    for attempt in range(3):
        payload = b"liveness-%d" % attempt
        accepted = net.run_until(lambda p=payload: net.propose(p), LIVENESS_ELECTION_TICKS)
        assert accepted is not None, "no leader accepted a proposal after healing"
        lead = net.leader()
        assert lead is not None
        index = net.nodes[lead].node.raft.raft_log.last_index()
        term = net.nodes[lead].node.raft.term

        def settled(i: int = index, term: int = term) -> bool:
            """Applied everywhere, or its leader deposed (a newer leader may have cut the
            entry from its log, and then nothing ever reaches its index: propose again)."""
            if all(n.applied >= i for n in members()):
                return True
            now = net.leader()
            return now is not None and net.nodes[now].node.raft.term != term

        done = net.run_until(settled, LIVENESS_COMMIT_TICKS + LIVENESS_ELECTION_TICKS)
        assert done is not None, "nothing committed on every node after healing"
        entry = net.entry_at.get(index)
        applied = all(n.applied >= index for n in members())
        if applied and entry is not None and entry.data == payload:
            return
    raise AssertionError("three proposals in a row were lost after healing")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_schedules_keep_every_safety_property_and_recover_once_healed(
    scenario: tuple[int, int, Faults, NodeOptions, list[Action]],
) -> None:
    n, seed, faults, options, plan = scenario
    net = RaftNetwork(range(1, n + 1), seed, faults=faults, options=options)
    counter = [0]
    for a in plan:
        perform(net, a, counter)
    net.check_log_matching()
    heal_and_require_liveness(net)
    net.check_log_matching()
    digests = {node.digest for node in net.nodes.values() if node.applied == net.nodes[1].applied}
    assert len(digests) == 1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reconfiguration_scenarios())
def test_membership_changes_under_chaos_keep_safety_and_liveness(
    scenario: tuple[int, int, Faults, NodeOptions, list[Action]],
) -> None:
    n, seed, faults, options, plan = scenario
    net = RaftNetwork(range(1, n + 1), seed, faults=faults, options=options)
    counter = [0]
    for a in plan:
        perform(net, a, counter)
    net.check_log_matching()
    heal_and_require_liveness(net)
    net.check_log_matching()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([3, 5]), pre_vote=st.booleans())
def test_a_minority_partition_never_commits_and_its_entries_are_never_applied(
    seed: int, n: int, pre_vote: bool
) -> None:
    net = RaftNetwork(
        range(1, n + 1), seed, options=NodeOptions(pre_vote=pre_vote, check_quorum=True)
    )
    assert net.run_until(lambda: net.leader() is not None, 300) is not None
    net.run(5)
    lead = net.leader()
    assert lead is not None
    others = [i for i in range(1, n + 1) if i != lead]
    minority = [lead, *others[: (n - 1) // 2 - 1]]
    majority = [i for i in range(1, n + 1) if i not in minority]
    net.partition(minority, majority)
    commits = {i: net.commit_index(i) for i in minority}
    for k in range(5):
        net.propose(b"minority-%d" % k, via=lead)
    for _ in range(60):
        net.tick()
        assert all(net.commit_index(i) == commits[i] for i in minority)
    net.heal()
    assert net.run_until(lambda: net.leader() is not None, 300) is not None
    net.propose(b"majority")
    net.run(60)
    assert net.entry_at, "nothing was applied at all"
    assert not any(e.data.startswith(b"minority-") for e in net.entry_at.values())


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([3, 5]),
    pre_vote=st.booleans(),
    quiet=st.booleans(),
)
def test_safe_reads_are_linearizable_under_chaos(
    seed: int, n: int, pre_vote: bool, quiet: bool
) -> None:
    net = RaftNetwork(
        range(1, n + 1),
        seed,
        faults=Faults(drop=0.1, duplicate=0.1, max_delay=3),
        options=NodeOptions(pre_vote=pre_vote, check_quorum=pre_vote, lean_replication=quiet),
    )
    rng = net.rng
    for t in range(300):
        if t % 2 == 0:
            net.propose(b"w%d" % t, via=rng.randint(1, n))
        if t % 3 == 0:
            net.read(rng.randint(1, n), b"q%d" % t)  # the network checks each answer
        if t % 50 == 10:
            cut = rng.sample(range(1, n + 1), rng.randint(1, n - 1))
            net.partition(cut, [i for i in range(1, n + 1) if i not in cut])
        if t % 50 == 35:
            net.heal()
        net.tick()
    answered = sum(len(node.read_states) for node in net.nodes.values())
    assert answered > 0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([3, 5]))
def test_the_same_seed_replays_the_same_run(seed: int, n: int) -> None:
    def run() -> tuple[object, ...]:
        net = RaftNetwork(range(1, n + 1), seed, faults=Faults(drop=0.1, max_delay=2))
        for t in range(150):
            if t % 7 == 0:
                net.propose(b"%d" % t)
            net.tick()
        return (net.delivered, net.dropped, tuple(sorted(net.terms().items())), net.nodes[1].digest)

    assert run() == run()


class RaftChaos(RuleBasedStateMachine):
    """Random operator actions on a 5-node cluster; invariants after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = RaftNetwork(
            range(1, 6),
            7,
            faults=Faults(drop=0.05, duplicate=0.05, max_delay=2),
            options=NodeOptions(snapshot_every=6),
        )
        self.counter = 0

    @rule(ticks=st.integers(1, 20))
    def tick(self, ticks: int) -> None:
        self.net.run(ticks)

    @rule(node=st.integers(1, 5))
    def propose(self, node: int) -> None:
        if self.net.nodes[node].alive:
            self.counter += 1
            self.net.propose(b"c%d" % self.counter, via=node)

    @rule(group=st.frozensets(st.integers(1, 5), min_size=1, max_size=4))
    def partition(self, group: frozenset[int]) -> None:
        self.net.partition(group, [i for i in range(1, 6) if i not in group])

    @rule()
    def heal(self) -> None:
        self.net.heal()

    @rule(node=st.integers(1, 5))
    def read(self, node: int) -> None:
        if self.net.nodes[node].alive:
            self.counter += 1
            self.net.read(node, b"read-%d" % self.counter)

    @precondition(lambda self: sum(n.alive for n in self.net.nodes.values()) > 3)
    @rule(node=st.integers(1, 5))
    def crash(self, node: int) -> None:
        self.net.crash(node)

    @rule(node=st.integers(1, 5))
    def restart(self, node: int) -> None:
        if not self.net.nodes[node].alive:
            self.net.restart(node)

    @invariant()
    def safety_holds(self) -> None:
        self.net.check_invariants()
        self.net.check_log_matching()

    @invariant()
    def at_most_one_leader_per_term_among_live_nodes(self) -> None:
        leaders = [
            (n.node.raft.term, n.id) for n in self.net.live() if n.node.raft.state is Role.LEADER
        ]
        terms = [t for t, _ in leaders]
        assert len(terms) == len(set(terms))

    def teardown(self) -> None:
        heal_and_require_liveness(self.net)


TestRaftChaos = RaftChaos.TestCase
TestRaftChaos.settings = settings(max_examples=12, stateful_step_count=30, deadline=None)
