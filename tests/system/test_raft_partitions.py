"""Network partitions between real `raft_kv` processes, each in its own network namespace.

Needs root and iproute2 (`gpu_platform.testing.netns.available()`): skips without them on a
developer machine, fails in CI (GPU_PLATFORM_REQUIRE_SYSTEM_TESTS=1). Waits are generous (the
machine is shared) and nothing asserts on time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_platform.testing import netns
from gpu_platform.testing.linearizability import Verdict, check
from gpu_platform.testing.linearizability_models import KvModel
from gpu_platform.testing.linearizability_report import explain
from gpu_platform.testing.netns_kv import KvClients, NetnsKvCluster, RoleWatcher, wait_until
from gpu_platform.testing.system import require

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(600)]

WAIT = 90.0
MakeCluster = Callable[[int], NetnsKvCluster]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[MakeCluster]:
    reason = netns.available()
    require(reason is None, reason or "")
    made: list[tuple[netns.NetnsNetwork, NetnsKvCluster | None]] = []

    def make(n: int) -> NetnsKvCluster:
        net = netns.NetnsNetwork(n)
        made.append((net, None))
        root = tmp_path / f"cluster{len(made)}"
        root.mkdir()
        cluster = NetnsKvCluster(net, root)
        made[-1] = (net, cluster)
        return cluster

    yield make
    for net, cluster in reversed(made):
        try:
            if cluster is not None:
                cluster.close()
        finally:
            net.close()


def put_until_acked(c: NetnsKvCluster, among: list[int], key: str, value: str) -> int:
    """Put through whoever leads `among` until one answer is 200; returns that leader."""
    done: list[int] = []

    def attempt() -> bool:
        lead = c.wait_leader(among, timeout=10.0)
        if lead is not None and c.put(lead, key, value)[0] == 200:
            done.append(lead)
            return True
        return False

    assert wait_until(attempt, WAIT), f"no leader of {among} acknowledged {key}={value}"
    return done[0]


def converged(c: NetnsKvCluster) -> bool:
    dumps = [c.dump(i) for i in c.ids]
    return all(d is not None for d in dumps) and all(d == dumps[0] for d in dumps)


def assert_minority_cannot_commit(
    c: NetnsKvCluster, old: int, minority: list[int], majority: list[int]
) -> None:
    """With `minority` (holding the old leader) cut off: the old leader acknowledges nothing
    and its commit index stays put, while the majority elects a leader and commits."""
    before = c.status(old)
    assert before is not None
    code, _ = c.put(old, "cut", "lost")  # waits the node's --timeout, then 503 (or NotLeader)
    assert code != 200
    new = put_until_acked(c, majority, "after", "majority")
    assert new in majority
    code, _ = c.put(old, "cut2", "lost")
    assert code != 200
    after = c.status(old)
    assert after is not None and after["commit"] == before["commit"]
    for i in minority:  # a follower may still learn the old commit index, never more
        st = c.status(i)
        assert st is not None and st["commit"] <= before["commit"]


def assert_heals(c: NetnsKvCluster, old: int) -> None:
    """After heal the old leader steps down and every node applies the same data."""
    c.net.heal()
    assert wait_until(lambda: (c.status(old) or {}).get("role") != "leader", WAIT)
    assert wait_until(lambda: converged(c), WAIT), [c.dump(i) for i in c.ids]
    data = c.dump(old)
    assert data is not None
    assert data["kv"].get("before") == "1" and data["kv"].get("after") == "majority"
    assert "cut" not in data["kv"] and "cut2" not in data["kv"]


def test_an_isolated_leader_commits_nothing_and_steps_down_after_heal(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(3)
    old = put_until_acked(c, c.ids, "before", "1")
    watcher = RoleWatcher(c)
    watcher.start()
    try:
        c.net.isolate(old)
        rest = [i for i in c.ids if i != old]
        assert_minority_cannot_commit(c, old, [old], rest)
        assert_heals(c, old)
    finally:
        watcher.stop()
    assert watcher.two_leaders() == {}
    assert len(watcher.leaders_by_term()) >= 2  # the watcher saw the old and the new leader


def test_five_nodes_split_two_three_only_the_three_commit(make_cluster: MakeCluster) -> None:
    c = make_cluster(5)
    old = put_until_acked(c, c.ids, "before", "1")
    watcher = RoleWatcher(c)
    watcher.start()
    try:
        minority = [old, next(i for i in c.ids if i != old)]
        majority = [i for i in c.ids if i not in minority]
        c.net.partition([set(minority), set(majority)])
        assert_minority_cannot_commit(c, old, minority, majority)
        assert_heals(c, old)
    finally:
        watcher.stop()
    assert watcher.two_leaders() == {}


def test_no_two_nodes_ever_lead_in_one_term_across_repeated_partitions(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(3)
    put_until_acked(c, c.ids, "before", "1")
    watcher = RoleWatcher(c)
    watcher.start()
    try:
        for round_ in range(4):
            lead = c.wait_leader(timeout=WAIT)
            assert lead is not None
            c.net.isolate(lead)
            rest = [i for i in c.ids if i != lead]
            put_until_acked(c, rest, f"r{round_}", "x")
            c.net.heal()
            assert wait_until(lambda: converged(c), WAIT)
    finally:
        watcher.stop()
    assert watcher.two_leaders() == {}
    assert len(watcher.leaders_by_term()) >= 4


def test_client_operations_across_partitions_and_heals_are_linearizable(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(3)
    put_until_acked(c, c.ids, "before", "1")
    clients = KvClients(c, n=3, keys=6, seed=7)
    clients.start()
    try:
        for _ in range(2):
            lead = c.wait_leader(timeout=WAIT)
            assert lead is not None
            c.net.isolate(lead)  # clients talking to it now time out: indeterminate puts
            assert clients.wait_acked(10, WAIT)
            c.net.heal()
            follower = next(i for i in c.ids if i != c.wait_leader(timeout=WAIT))
            c.net.isolate(follower)  # a cut follower must not serve stale reads
            assert clients.wait_acked(10, WAIT)
            c.net.heal()
    finally:
        clients.stop()
    history = clients.history()
    assert sum(op.ret is not None for op in history) > 40
    result = check(KvModel(), history, timeout_s=300)
    assert result.verdict is Verdict.LINEARIZABLE, explain(KvModel(), history, result)


def test_the_checker_catches_reads_served_from_a_cut_off_follower(
    make_cluster: MakeCluster,
) -> None:
    c = make_cluster(3)
    lead = put_until_acked(c, c.ids, "before", "1")
    follower = next(i for i in c.ids if i != lead)
    clients = KvClients(c, n=3, keys=2, seed=3, dirty_reads=True)
    clients.start()
    try:
        assert clients.wait_acked(10, WAIT)
        c.net.isolate(follower)  # its local state goes stale while the majority moves on
        assert clients.wait_acked(60, WAIT)
    finally:
        clients.stop()
    history = clients.history()
    result = check(KvModel(), history, timeout_s=300)
    assert result.verdict is Verdict.NOT_LINEARIZABLE, explain(KvModel(), history, result)
