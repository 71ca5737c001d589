"""The 3-server cluster under open-loop arrivals (issue 21: "p99 ≤ 250 ms at 500 jobs/s offered").

3 servers (real processes, Raft over TCP — or over gRPC with GPU_PLATFORM_RAFT_TRANSPORT=grpc,
`raft_transport` in each row's params —, SQLite with fsync) and simulated agents from one
`agent_swarm` process, started as `bench_control_plane_scale.py` starts them. Every job is
`fake-exit 0` on one GPU: it ends at the swarm's next tick, so GPUs free up as jobs arrive.

Open loop: at each offered rate, job i is due at t0 + i/rate whatever happened to the earlier
ones, and is submitted to the leader at its due time by one of `SUBMITTERS` separate
processes (`_open_loop.py`: asyncio, job i from process i mod SUBMITTERS), so one client
process is not the bound; after a "not the leader" refusal (gRPC) or a refused connection
(REST) a submitter sends to the next server. Each submitter reports, per job, when it was
due, sent and acknowledged: `send_late_p99_ms` is how late the clients sent (the client keeps
up when it stays small). Two curves on one cluster, one per API (`params.api`): gRPC
(grpc.aio's client) and REST (`POST /v1/jobs` over kept-alive HTTP/1.1 connections, a
minimal client: httpx would cost the 2-vCPU machine more than the server's share).
`GPU_PLATFORM_BENCH_API=grpc` (or `rest`) runs one.

Per rate, row `cluster.offered_to_bound` (params: offered_per_s, nodes, GPUs):
* p50/p99: submit → bound, the leader's bind time minus its submit time (both from the job's
  history, as `cluster.submit_to_bound` does); ops_per_s = jobs bound per second from the
  first due time to the last bind (or the last due time, if later).
* `extra`: submit latency p50/p99 from the due time (as the client saw it), due → bound
  p50/p99, jobs submitted / bound / lost (errors, refused at the in-flight cap, unanswered),
  the leader's CPU per job (its CPU over the point, until the point's jobs completed, divided
  by the jobs submitted; `leader_idle_cpu_pct` is its CPU with no jobs, the agents' heartbeats),
  CPU by process (leader, followers, swarm, submitters) and the machine's busy share, RSS,
  the leader's context switches per job (voluntary, involuntary: its threads waking and
  pre-empted), which server led and the CPUs it may use,
  elections (term changes during the point), the load average.

A rate is *saturated* (its curve stops there, as in `bench_offered_load.py`) when fewer than
99 % of its jobs are submitted and bound, bound jobs/s fall below 90 % of the offer, or the
submit → bound or submit p99 passes 1 s.

Full: 128 nodes x 8 GPUs (1,024 GPUs), 100 → 2,000 jobs/s, 8 s a point. --quick: 32 nodes,
100 → 1,000 jobs/s (steps of 100 to 500), 3 s a point (smoke, GPU_PLATFORM_BENCH_SMOKE=1:
4 nodes, one 1 s point). `--rates 500,1000 --seconds 30 --nodes 128` runs chosen points (e.g.
to profile the leader: its pid is printed); `--preload N` first runs N jobs (arrays) to the
end, so that the points run on a large state (`params.preloaded`); `--logs DIR` keeps the
servers' logs (at level info) there. Writes `cluster_offered.png` beside results.json when matplotlib exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import percentile, result
from _open_loop import Submitters
from _plots import loglog_figure
from bench_control_plane_scale import RAFT_TRANSPORT, _elections, _proc_cpu_rss, _swarmed

from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until

SUBMITTERS = 3
# which API the submitters use, each a curve of its own on one cluster: gRPC, then REST
APIS = tuple(os.environ.get("GPU_PLATFORM_BENCH_API", "grpc,rest").split(","))
BOUND_S = 20.0  # then how long the point's jobs have to complete
PRELOAD = int(sys.argv[sys.argv.index("--preload") + 1]) if "--preload" in sys.argv else 0
IDLE_S = 1.0 if os.environ.get("GPU_PLATFORM_BENCH_SMOKE") == "1" else 3.0  # leader CPU idle


# -- the driver ------------------------------------------------------------------------------


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU ticks of the whole machine, from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return float(sum(ticks) - idle), float(sum(ticks))


def _switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of all of a process's threads so far (of
    the threads alive now: one that ended takes its count with it)."""
    vol = invol = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    invol += int(line.split()[1])
    return vol, invol


def _cpus_allowed(pid: int) -> str:
    """The CPUs a process may run on, as /proc lists them (e.g. "0-1", "1")."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return ""


def _cpu_by_role(c: ReplicatedCluster, lead: int, submitters: Submitters) -> dict[str, float]:
    """CPU seconds so far: the leader, the followers, the agent swarm, the submitters, and
    the servers' API workers (`api_workers`)."""
    out = {"leader": 0.0, "followers": 0.0, "swarm": 0.0, "submitters": 0.0, "api_workers": 0.0}
    for i, proc in c.servers.items():
        with contextlib.suppress(OSError):
            out["leader" if i == lead else "followers"] += _proc_cpu_rss(proc.pid)[0]
    me, servers = str(os.getpid()), {str(p.pid) for p in c.servers.values()}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[1] == me and b"agent_swarm" in (stat.parent / "cmdline").read_bytes():
                out["swarm"] += _proc_cpu_rss(int(stat.parent.name))[0]
            if fields[1] in servers and b"api_worker" in (stat.parent / "cmdline").read_bytes():
                out["api_workers"] += _proc_cpu_rss(int(stat.parent.name))[0]
    for proc in submitters.procs:
        out["submitters"] += _proc_cpu_rss(proc.pid)[0]
    return out


def _completed(c: ReplicatedCluster, lead: int) -> int:
    status = c.client.get(c.url(lead) + "/v1/status", timeout=60).json()
    return int(status["jobs_by_state"].get("COMPLETED", 0))


def _preload(c: ReplicatedCluster, lead: int, jobs: int) -> int:
    """`--preload N`: N jobs as arrays of 1,000 over REST, run to the end before the first
    point, so that the points run on a state that holds them (snapshots encode them all)."""
    if not jobs:
        return 0
    t0, before = time.perf_counter(), _completed(c, lead)
    for start in range(0, jobs, 1000):
        body = {
            "command": ["fake-exit", "0"],
            "gpus": 1,
            "array": f"0-{min(1000, jobs - start) - 1}",
        }
        c.client.post(c.url(lead) + "/v1/arrays", json=body, timeout=120).raise_for_status()
    wait_until(lambda: _completed(c, lead) - before >= jobs, 1800, 0.5)
    print(f"   preloaded {jobs} jobs in {time.perf_counter() - t0:.1f} s", flush=True)
    return jobs


def _terms(c: ReplicatedCluster) -> dict[int, Any]:
    return {i: (c.cluster(i) or {}).get("term") for i in c.alive()}


def _histories(c: ReplicatedCluster, lead: int, listed: int, ids: set[str]) -> dict[str, Any]:
    """The point's jobs (`listed` = jobs before it), read from a follower's replica (stale
    reads), so listing hundreds of jobs does not load the leader between points; waits up to
    10 s for the follower to have applied every bind."""
    follower = next((i for i in c.alive() if i != lead), lead)
    url = c.url(follower) + f"/v1/jobs?offset={listed}"
    found: dict[str, Any] = {}

    def complete() -> bool:
        r = c.client.get(url, headers={"X-Read-Consistency": "stale"}, timeout=120)
        found.clear()
        found.update({j["id"]: j for j in r.json()} if r.status_code == 200 else {})
        return all(
            any(h["state"] == "SCHEDULED" for h in found[i]["history"]) if i in found else False
            for i in ids
        )

    wait_until(complete, 10.0, 0.5)
    return found


def _ms(samples: list[float], q: float) -> float:
    return round(percentile(samples, q) / 1000, 1)


def _point(
    c: ReplicatedCluster,
    submitters: Submitters,
    lead: int,
    nodes: int,
    rate: float,
    seconds: float,
    listed: int,
    api: str,
) -> dict[str, Any]:
    """One offered rate on the running cluster over `api` (grpc, rest); `listed`: jobs
    submitted before this point."""
    pid = c.servers[lead].pid
    ports, scheme = (c.http, "http:") if api == "rest" else (c.grpc, "")
    others = [f"{scheme}127.0.0.1:{ports[i]}" for i in c.alive() if i != lead]
    target = ",".join([f"{scheme}127.0.0.1:{ports[lead]}", *others])
    terms0 = _terms(c)
    before = _completed(c, lead)
    at: dict[str, Any] = {}

    def started() -> None:  # the CPU window opens once the submitters are up
        at.update(cpu=_proc_cpu_rss(pid)[0], wall=time.perf_counter(), switches=_switches(pid))
        at.update(roles=_cpu_by_role(c, lead, submitters), busy=_machine_busy())

    p = submitters.offer(target, rate, seconds, started)
    ok = len(p["jobs"])
    wait_until(lambda: _completed(c, lead) - before >= ok, BOUND_S, 0.25)
    cpu1, rss = _proc_cpu_rss(pid)
    switches = [b - a for a, b in zip(at["switches"], _switches(pid), strict=True)]
    roles1, busy1 = _cpu_by_role(c, lead, submitters), _machine_busy()
    window = time.perf_counter() - at["wall"]
    cpu0, roles0, busy0 = at["cpu"], at["roles"], at["busy"]
    elections = _elections(terms0, _terms(c))
    load = [round(x, 2) for x in os.getloadavg()]
    history = _histories(c, lead, listed, {job[0] for job in p["jobs"]})
    bound_us, due_bound_us, submit_us, late_us, binds = [], [], [], [], []
    for job_id, due, sent, acked in p["jobs"]:
        submit_us.append((acked - due) * 1e6)
        late_us.append((sent - due) * 1e6)
        job = history.get(job_id)
        when = {h["state"]: h["at"] for h in job["history"]} if job else {}
        if "SCHEDULED" in when:
            binds.append(when["SCHEDULED"])
            bound_us.append((when["SCHEDULED"] - job["submitted_at"]) * 1e6)
            due_bound_us.append((when["SCHEDULED"] - due) * 1e6)
    span = max([p["end"], *binds]) - p["t0"]
    row = result(
        "cluster.offered_to_bound",
        {"offered_per_s": rate, "seconds": seconds, "nodes": nodes, "gpus": nodes * 8,
         "servers": 3, "api": api, "submitters": SUBMITTERS, "raft_transport": RAFT_TRANSPORT,
         "api_workers": int(os.environ.get("GPU_PLATFORM_API_WORKERS") or 0),
         "cpu_affinity": os.environ.get("GPU_PLATFORM_CPU_AFFINITY") or "auto",
         "agent_transport": os.environ.get("GPU_PLATFORM_AGENT_TRANSPORT") or "tcp",
         **({"preloaded": PRELOAD} if PRELOAD else {})},
        bound_us or [BOUND_S * 1e6],  # none bound: at least the wait
        extra={
            "submit_p50_ms": _ms(submit_us, 50),
            "submit_p99_ms": _ms(submit_us, 99),
            "send_late_p99_ms": _ms(late_us, 99),
            "due_to_bound_p50_ms": _ms(due_bound_us, 50),
            "due_to_bound_p99_ms": _ms(due_bound_us, 99),
            "offered": p["offered"],
            "submitted": ok,
            "bound": len(bound_us),
            "errors": p["errors"],
            "refused": p["refused"],
            "timed_out": p["timed_out"],
            # submitters that moved to the next server after a refusal (an election)
            "moved_server": p["moved"],
            "first_error": p["first_error"],
            "leader_cpu_ms_per_job": round((cpu1 - cpu0) / max(ok, 1) * 1e3, 3),
            "leader_cpu_pct": round((cpu1 - cpu0) / window * 100, 1),
            "leader_cpu_window_s": round(window, 2),
            "leader_rss_mib": round(rss / (1 << 20), 1),
            # which server led, and the CPUs it may run on (one with cpu_affinity = auto)
            "leader": {"server": lead, "cpus": _cpus_allowed(pid)},
            # the leader's threads waking (a GIL or lock hand-over, a wait) and pre-empted
            "leader_switches_per_job": [round(n / max(ok, 1), 2) for n in switches],
            # CPU over the point by process (seconds), and the machine's busy share
            "cpu_s_by_process": {k: round(roles1[k] - roles0[k], 2) for k in roles1},
            "machine_busy_pct": round((busy1[0] - busy0[0]) / (busy1[1] - busy0[1]) * 100, 1),
            "elections": elections,
            "load_average": load,
        },
    )  # fmt: skip
    row["ops_per_s"] = round(len(binds) / span, 1) if span > 0 else 0.0
    lost = p["offered"] - len(bound_us)
    row["extra"]["saturated"] = bool(
        lost > 0.01 * p["offered"]
        or row["ops_per_s"] < 0.9 * rate
        or row["p99_us"] > 1e6
        or row["extra"]["submit_p99_ms"] > 1000
    )
    return row


def _print(row: dict[str, Any]) -> None:
    e = row["extra"]
    print(
        f"   {row['params']['api']:<4} offered {row['params']['offered_per_s']:>5}/s  bound {row['ops_per_s']:>7}/s  "
        f"submit->bound p50 {row['p50_us'] / 1000:7.1f} p99 {row['p99_us'] / 1000:7.1f} ms  "
        f"submit p50 {e['submit_p50_ms']:6.1f} p99 {e['submit_p99_ms']:7.1f} ms  "
        f"late p99 {e['send_late_p99_ms']:6.1f} ms  cpu {e['leader_cpu_ms_per_job']:5.2f} ms/job "
        f"({e['leader_cpu_pct']}%)  machine {e['machine_busy_pct']}%  elections {e['elections']}  load {e['load_average'][0]}"
        f"{'  SATURATED' if e['saturated'] else ''}",
        flush=True,
    )


def curve(root: Path, nodes: int, rates: tuple[float, ...], seconds: float) -> list[dict[str, Any]]:
    level = "info" if "--logs" in sys.argv else "warning"
    with _swarmed(root, nodes, level) as (c, lead):
        submitters = Submitters(SUBMITTERS)
        try:
            rows = _points(c, submitters, lead, nodes, rates, seconds)
        finally:
            submitters.close()
            if "--logs" in sys.argv:  # keep the servers' and the swarm's logs
                keep = Path(sys.argv[sys.argv.index("--logs") + 1])
                keep.mkdir(parents=True, exist_ok=True)
                for log in root.glob("*.log"):
                    shutil.copy(log, keep / log.name)
    return rows


def _points(
    c: ReplicatedCluster,
    submitters: Submitters,
    lead: int,
    nodes: int,
    rates: tuple[float, ...],
    seconds: float,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    pid = c.servers[lead].pid
    print(f"   leader server-{lead} pid {pid}, {nodes} nodes connected, raft over {RAFT_TRANSPORT}",
          flush=True)  # fmt: skip
    listed = _preload(c, lead, PRELOAD)
    idle0, _ = _proc_cpu_rss(pid)
    time.sleep(IDLE_S)
    idle_pct = round((_proc_cpu_rss(pid)[0] - idle0) / IDLE_S * 100, 1)
    for api in APIS:  # each API's curve up to its saturation
        for rate in rates:
            if c.wait_leader(timeout=120) != lead:  # an election meanwhile: the new one
                lead = c.wait_leader(timeout=120)
                print(f"   the leader is now server-{lead} pid {c.servers[lead].pid}", flush=True)
            row = _point(c, submitters, lead, nodes, rate, seconds, listed, api)
            e = row["extra"]
            e["leader_idle_cpu_pct"] = idle_pct
            # less what the leader burns idle over the same window (agents' heartbeats)
            idle_ms = idle_pct / 100 * e["leader_cpu_window_s"] * 1e3
            e["leader_cpu_ms_per_job_net"] = round(
                e["leader_cpu_ms_per_job"] - idle_ms / max(e["submitted"], 1), 3
            )
            listed += row["extra"]["submitted"]
            rows.append(row)
            _print(row)
            if row["extra"]["saturated"]:
                break
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    nodes, rates, seconds = (32, (100, 200, 300, 400, 500, 750, 1000), 3.0) if quick else (
        128, (100, 250, 500, 750, 1000, 1500, 2000), 8.0)  # fmt: skip
    if os.environ.get("GPU_PLATFORM_BENCH_SMOKE") == "1":
        nodes, rates, seconds = 4, (20,), 1.0
    if "--rates" in sys.argv:
        rates = tuple(float(r) for r in sys.argv[sys.argv.index("--rates") + 1].split(","))
    if "--seconds" in sys.argv:
        seconds = float(sys.argv[sys.argv.index("--seconds") + 1])
    if "--nodes" in sys.argv:
        nodes = int(sys.argv[sys.argv.index("--nodes") + 1])
    with tempfile.TemporaryDirectory(prefix="bench-offered-") as tmp:
        rows = curve(Path(tmp), nodes, rates, seconds)
    try:
        plot(rows, Path(os.environ.get("GPU_PLATFORM_BENCH_DIR", "bench")) / "cluster_offered.png")
    except ImportError:
        print("   matplotlib missing: no cluster_offered.png", flush=True)
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Submit → bound and submit latency (p50, p99) against the offered rate, log-log."""
    with loglog_figure(
        path,
        xlabel="offered load (jobs/s, open loop, to the leader)",
        ylabel="latency (ms)",
        title="3 servers, simulated agents: latency against offered load (shaded: saturated)",
    ) as ax:
        for api, color in (("grpc", "tab:blue"), ("rest", "tab:green")):
            mine = [r for r in rows if r["params"]["api"] == api]
            x = [r["params"]["offered_per_s"] for r in mine]
            for key, style, label in (("p50_us", "o-", "p50"), ("p99_us", "s--", "p99")):
                ys = [r[key] / 1000 for r in mine]
                ax.plot(x, ys, style, color=color, label=f"{api}: submit → bound {label}")
            ys = [r["extra"]["submit_p99_ms"] for r in mine]
            ax.plot(x, ys, "^:", color=color, label=f"{api}: submit p99")
            sat = [r for r in mine if r["extra"]["saturated"]]
            if sat:
                ax.axvline(sat[0]["params"]["offered_per_s"], color=color, alpha=0.2, lw=6)
        ax.axhline(250, color="tab:red", ls=":", label="issue 21: p99 ≤ 250 ms at 500/s")


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv), indent=2))
