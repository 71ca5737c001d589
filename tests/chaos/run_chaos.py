"""`make chaos`: fault scenarios against real clusters, each checked for linearizability.

Not part of `make test` (pytest collects only `test_*.py`). Needs root and iproute2: every
`raft_kv` node, and in `control_plane.partitions` every server and agent, runs in its own
network namespace (`gpu_platform.testing.netns`).

Scenarios are entries of `SCENARIOS`: a name and a function `(Options) -> dict` that builds
what it needs (in its own fresh directory, `workload.scenario_dir`), runs its faults, checks
its history and returns its figures; the dict must hold `linearizable` (bool) and may hold the
summed figures `TOTALS` (faults injected, histories checked, jobs lost, ...). Add a scenario by
appending to the list. Each history is saved as `<out without .json>/<scenario>.json`
(`bench/chaos/`); the summary (every scenario's figures and the totals) is printed and written
to `--out` (default `bench/chaos.json`). Exit status 1 when a history is not linearizable (or
the check gave up) or a total that must be 0 is not, 2 when the harness cannot run here.

    python tests/chaos/run_chaos.py [--kills 20] [--partitions 10] [--rounds 20] [--seed 1]
                                    [--long] [--only NAME] [--out FILE]

`--long` raises the defaults so that the scenarios inject more than 1,000 faults in all.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fencing  # tests/chaos/fencing.py, beside this script
from mixed_faults import mixed_faults
from workload import JobWorkload, scenario_dir

from gpu_platform.testing import netns
from gpu_platform.testing.chaos_history import operations_to_json, save_history
from gpu_platform.testing.cluster_procs import ReplicatedCluster
from gpu_platform.testing.linearizability import Verdict, check
from gpu_platform.testing.linearizability_models import KvModel
from gpu_platform.testing.linearizability_report import explain
from gpu_platform.testing.netns_cluster import ClusterWatcher, NetnsControlPlane
from gpu_platform.testing.netns_kv import KvClients, NetnsKvCluster, RoleWatcher, wait_until

WAIT = 90.0
#: figures summed over the scenarios into the summary; all but the first three must be 0.
#: `commands_completed_twice` alone is at-least-once, not a fault: a task that ends while its
#: agent is frozen, before the fence, has its exit never reported, so the job runs again; one
#: that completed twice otherwise is `completed_twice_unexplained`.
TOTALS = (
    "faults_injected",
    "histories_checked",
    "commands_completed_twice",
    "completed_twice_unexplained",
    "jobs_lost",
    "jobs_duplicated",
    "attempts_overlapping",
    "gpus_held_twice",
    "attempts_survived_fence",
)
#: `--long`: 100 + 100 + 100 + 100 + 5 + 100 + 100 + 400 = 1,005 faults
LONG = {"kills": 100, "partitions": 100, "rounds": 400}


@dataclass(frozen=True)
class Options:
    kills: int
    partitions: int
    seed: int
    check_timeout_s: float
    rounds: int = 20
    history_dir: Path = Path("bench/chaos")


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Options], dict[str, Any]]


def percentile(samples: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None without samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


@contextmanager
def kv_cluster(nodes: int, name: str) -> Iterator[NetnsKvCluster]:
    with scenario_dir(name) as tmp, netns.NetnsNetwork(nodes) as net:
        cluster = NetnsKvCluster(net, tmp)
        try:
            if cluster.wait_leader(timeout=WAIT) is None:
                raise RuntimeError(f"no leader elected within {WAIT:.0f} s")
            yield cluster
        finally:
            cluster.close()


def wait_new_leader(c: NetnsKvCluster, old: int, among: list[int]) -> tuple[int, float]:
    """(the first node of `among` other than `old` to report LEADER, seconds it took)."""
    t0 = time.monotonic()
    found: list[int] = []

    def new_one() -> bool:
        found[:] = sorted(c.leaders(among) - {old})
        return bool(found)

    if not wait_until(new_one, WAIT, interval=0.02):
        raise RuntimeError(f"no new leader among {among} within {WAIT:.0f} s")
    return found[0], time.monotonic() - t0


def history_verdict(
    clients: KvClients, watcher: RoleWatcher, opts: Options, name: str
) -> dict[str, Any]:
    history = clients.history()
    t0 = time.monotonic()
    result = check(KvModel(), history, timeout_s=opts.check_timeout_s)
    path = opts.history_dir / f"{name}.json"
    save_history(path, model="KvModel", records=operations_to_json(history), result=result)
    figures: dict[str, Any] = {
        "ops": len(history),
        "ops_completed": sum(op.ret is not None for op in history),
        "ops_indeterminate": sum(op.ret is None for op in history),
        "check_s": round(time.monotonic() - t0, 2),
        "verdict": result.verdict.value,
        "linearizable": result.verdict is Verdict.LINEARIZABLE,
        "two_leaders_in_a_term": {str(t): sorted(n) for t, n in watcher.two_leaders().items()},
        "terms_seen": len(watcher.leaders_by_term()),
        "histories_checked": 1,
        "history": str(path),
    }
    if figures["two_leaders_in_a_term"]:
        figures["linearizable"] = False  # election safety is part of the verdict
    if result.verdict is Verdict.NOT_LINEARIZABLE:
        print(explain(KvModel(), history, result), file=sys.stderr)
    return figures


def _under_load(
    nodes: int,
    opts: Options,
    name: str,
    faults: Callable[[NetnsKvCluster, KvClients], dict[str, Any]],
) -> dict[str, Any]:
    with kv_cluster(nodes, name) as c:
        clients = KvClients(c, n=3, keys=8, seed=opts.seed)
        watcher = RoleWatcher(c, interval=0.1)
        watcher.start()
        clients.start()
        t0 = time.monotonic()
        try:
            figures = faults(c, clients)
        finally:
            clients.stop()
            watcher.stop()
        figures["duration_s"] = round(time.monotonic() - t0, 1)
        figures.update(history_verdict(clients, watcher, opts, name))
    return figures


def leader_kills(opts: Options) -> dict[str, Any]:
    """Three nodes under client load; kill -9 the leader, time the next election, restart."""

    def faults(c: NetnsKvCluster, clients: KvClients) -> dict[str, Any]:
        times: list[float] = []
        for _ in range(opts.kills):
            old = c.wait_leader(timeout=WAIT)
            if old is None:
                raise RuntimeError("no single leader before a kill")
            clients.wait_acked(5, WAIT)  # some writes under this leader first
            c.kill9(old)
            _, took = wait_new_leader(c, old, [i for i in c.ids if i != old])
            times.append(took)
            c.start(old)
            if not wait_until(lambda: c.status(old) is not None, WAIT):  # noqa: B023
                raise RuntimeError(f"node {old} did not come back")
        return _leader_figures(times) | {
            "kills": len(times),
            "faults_injected": len(times),
            "nodes": len(c.ids),
        }

    return _under_load(3, opts, "raft_kv.leader_kills", faults)


def partitions(opts: Options) -> dict[str, Any]:
    """Five nodes under client load; each round cuts the leader into a minority (alone, or
    with one other node) or cuts a random minority, then heals."""
    rng = random.Random(opts.seed)

    def faults(c: NetnsKvCluster, clients: KvClients) -> dict[str, Any]:
        times: list[float] = []
        kinds: dict[str, int] = {}
        for _ in range(opts.partitions):
            lead = c.wait_leader(timeout=WAIT)
            if lead is None:
                raise RuntimeError("no single leader before a partition")
            others = [i for i in c.ids if i != lead]
            kind = rng.choice(["leader-alone", "leader-plus-one", "followers-minority"])
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == "followers-minority":
                minority = set(rng.sample(others, 2))
            else:
                minority = {lead} | set(rng.sample(others, 1 if kind == "leader-plus-one" else 0))
            majority = [i for i in c.ids if i not in minority]
            c.net.partition([minority, set(majority)])
            if lead in minority:
                _, took = wait_new_leader(c, lead, majority)
                times.append(took)
            clients.wait_acked(10, WAIT)
            c.net.heal()
            clients.wait_acked(5, WAIT)
        return _leader_figures(times) | {
            "partitions": opts.partitions,
            "faults_injected": opts.partitions,
            "kinds": kinds,
        }

    return _under_load(5, opts, "raft_kv.partitions", faults)


def _leader_figures(times: list[float]) -> dict[str, Any]:
    def ms(q: float) -> float | None:
        v = percentile(times, q)
        return None if v is None else round(v * 1000, 1)

    return {"time_to_new_leader_ms": {"p50": ms(50), "p99": ms(99), "max": ms(100)}}


@contextmanager
def control_plane(agents: int, name: str) -> Iterator[tuple[ReplicatedCluster, Path]]:
    with scenario_dir(name) as root:
        c = ReplicatedCluster(root, servers=3, agents=agents)
        try:
            c.start().wait_ready(timeout=WAIT)
            yield c, root
        finally:
            c.close()


def control_plane_leader_kills(opts: Options) -> dict[str, Any]:
    """3 `serve` servers and 2 agents under the job workload (held and real running jobs, every
    operation recorded) while the leader is killed -9 `kills` times (restarted after each):
    time to a new leader, and the workload's figures (`workload.JobWorkload.finish`)."""
    name = "control_plane.leader_kills"
    with control_plane(2, name) as (c, root):
        w = JobWorkload(c, root, seed=opts.seed, history_dir=opts.history_dir, seconds=3.0)
        times: list[float] = []
        t0 = time.monotonic()
        try:
            for _ in range(opts.kills):
                old = c.wait_leader(timeout=WAIT)
                w.wait_acked(5)
                killed = time.monotonic()
                c.kill_server(old)
                c.wait_leader([i for i in c.alive()], timeout=WAIT)
                times.append(time.monotonic() - killed)
                c.start_server(old)
                wait_until(lambda old=old: c.cluster(old) is not None, WAIT)  # type: ignore[misc]
                w.sample()
        finally:
            duration = round(time.monotonic() - t0, 1)
            figures = w.finish(name, opts.check_timeout_s)
        return _leader_figures(times) | {
            "kills": len(times),
            "faults_injected": len(times),
            "servers": 3,
            "duration_s": duration,
            **figures,
        }


def control_plane_node_loss(opts: Options) -> dict[str, Any]:
    """A frozen agent (SIGSTOP) `kills` times: its job runs elsewhere, never two at once."""
    with scenario_dir("control_plane.node_loss") as root:
        return fencing.frozen_agents(root, max(opts.kills, 1))


def control_plane_node_loss_defaults(opts: Options) -> dict[str, Any]:
    """As node_loss, with the server's default timing (5 rounds): recovery under 10 s?"""
    with scenario_dir("control_plane.node_loss_defaults") as root:
        return fencing.frozen_agents(root, 5, fencing.DEFAULTS)


def control_plane_agent_partitions(opts: Options) -> dict[str, Any]:
    """An agent cut off from every server `kills` times (network namespaces), as above."""
    with scenario_dir("control_plane.agent_partitions") as root:
        return fencing.cut_off_agents(root, max(opts.kills, 1))


def control_plane_mixed_faults(opts: Options) -> dict[str, Any]:
    """`rounds` faults drawn from leader kill -9, leader SIGSTOP/SIGCONT and agent
    SIGSTOP/resume under the job workload (`mixed_faults.py`)."""
    name = "control_plane.mixed_faults"
    with scenario_dir(name) as root:
        return mixed_faults(
            root,
            rounds=opts.rounds,
            seed=opts.seed,
            history_dir=opts.history_dir,
            check_timeout_s=opts.check_timeout_s,
        )


def control_plane_partitions(opts: Options) -> dict[str, Any]:
    """3 `serve` servers and 2 agents, each in its own network namespace; clients submit, cancel
    and read jobs while each of `partitions` rounds isolates the leader (from the other servers
    and both agents), times the first other server to report LEADER, checks the cut-off leader
    commits nothing, then heals and waits until it has caught up."""
    with scenario_dir("control_plane.partitions") as root, netns.NetnsNetwork(5) as net:
        c = NetnsControlPlane(net, root)
        try:
            c.start().wait_ready(timeout=WAIT)
            return _partition_rounds(c, root, opts)
        finally:
            c.close()


def _commit(c: NetnsControlPlane, i: int) -> int:
    info = c.cluster(i)
    return -1 if info is None else int(info["commit"])


def _partition_rounds(c: NetnsControlPlane, root: Path, opts: Options) -> dict[str, Any]:
    w = JobWorkload(c, root, seed=opts.seed, history_dir=opts.history_dir, seconds=3.0)
    watcher = ClusterWatcher(c)
    watcher.start()
    times: list[float] = []
    minority_commits = 0  # rounds in which the cut-off leader's commit index moved
    t0 = time.monotonic()
    try:
        for _ in range(opts.partitions):
            old = c.wait_leader(timeout=WAIT)
            rest = [i for i in c.ids if i != old]
            w.wait_acked(5)
            cut = time.monotonic()
            c.isolate(old)
            if not wait_until(lambda rest=rest: c.leader(rest) is not None, WAIT, 0.02):  # type: ignore[misc]
                raise RuntimeError(f"no new leader among {rest} within {WAIT:.0f} s")
            times.append(time.monotonic() - cut)
            time.sleep(max(0.0, cut + 1.0 - time.monotonic()))  # in-flight acks may land
            frozen = _commit(c, old)
            w.wait_acked(5)
            minority_commits += _commit(c, old) != frozen
            c.heal()
            target = _commit(c, c.wait_leader(rest, timeout=WAIT))
            wait_until(lambda old=old, t=target: _commit(c, old) >= t, WAIT)  # type: ignore[misc]
            w.sample()
    finally:
        duration = round(time.monotonic() - t0, 1)
        figures = w.finish("control_plane.partitions", opts.check_timeout_s)
        watcher.stop()
    two = {str(t): sorted(n) for t, n in watcher.two_leaders().items()}
    return _leader_figures(times) | {
        "partitions": len(times),
        "faults_injected": len(times),
        "servers": 3,
        "agents": 2,
        "duration_s": duration,
        "minority_commit_moved_rounds": minority_commits,
        "two_leaders_in_a_term": two,
        "terms_seen": len(watcher.leaders_by_term()),
        **figures,
        "linearizable": figures["linearizable"] and not two and not minority_commits,
    }


SCENARIOS: list[Scenario] = [
    Scenario("raft_kv.leader_kills", leader_kills),
    Scenario("raft_kv.partitions", partitions),
    Scenario("control_plane.leader_kills", control_plane_leader_kills),
    Scenario("control_plane.node_loss", control_plane_node_loss),
    Scenario("control_plane.node_loss_defaults", control_plane_node_loss_defaults),
    Scenario("control_plane.agent_partitions", control_plane_agent_partitions),
    Scenario("control_plane.partitions", control_plane_partitions),
    Scenario("control_plane.mixed_faults", control_plane_mixed_faults),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=None, help="leader kills (default 20; at least 20)")
    p.add_argument("--partitions", type=int, default=None, help="default 10")
    p.add_argument("--rounds", type=int, default=None, help="mixed-fault rounds (default 20)")
    p.add_argument("--long", action="store_true", help=f"defaults {LONG}: > 1,000 faults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check-timeout", type=float, default=600.0, help="seconds per history check")
    p.add_argument("--only", action="append", default=[], help="run only this scenario (repeat)")
    p.add_argument("--out", type=Path, default=Path("bench/chaos.json"))
    args = p.parse_args(argv)
    base = LONG if args.long else {"kills": 20, "partitions": 10, "rounds": 20}
    for key, value in base.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.kills < 1 or args.partitions < 1 or args.rounds < 1:
        p.error("--kills, --partitions and --rounds must be at least 1")
    unknown = set(args.only) - {s.name for s in SCENARIOS}
    if unknown:
        p.error(f"unknown scenario {sorted(unknown)}; known: {[s.name for s in SCENARIOS]}")
    reason = netns.available()
    if reason is not None:
        print(f"make chaos cannot run here: {reason}", file=sys.stderr)
        return 2
    history_dir = args.out.with_suffix("")
    opts = Options(
        args.kills, args.partitions, args.seed, args.check_timeout, args.rounds, history_dir
    )
    summary: dict[str, Any] = {"seed": args.seed, "long": args.long, "scenarios": {}}
    started = time.monotonic()
    for scenario in SCENARIOS:
        if args.only and scenario.name not in args.only:
            continue
        print(f"== {scenario.name}", flush=True)
        figures = scenario.run(opts)
        summary["scenarios"][scenario.name] = figures
        print(json.dumps(figures, indent=2), flush=True)
    figures = summary["scenarios"].values()
    totals = {k: sum(int(f.get(k, 0)) for f in figures) for k in TOTALS}
    summary["totals"] = totals
    summary["duration_s"] = round(time.monotonic() - started, 1)
    summary["linearizable"] = all(f["linearizable"] for f in figures) and not any(
        totals[k] for k in TOTALS[3:]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(totals))
    ok = "yes" if summary["linearizable"] else "NO"
    print(f"linearizable: {ok}; wrote {args.out} and the histories in {history_dir}/")
    return 0 if summary["linearizable"] else 1


if __name__ == "__main__":
    sys.exit(main())
