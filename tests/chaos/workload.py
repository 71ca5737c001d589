"""The job workload of the control-plane scenarios of `make chaos`, and where each scenario
keeps its data.

`JobWorkload(cluster, root, opts)` submits a blocker (a job that runs on, so held jobs stay
QUEUED), starts an `AttemptWatcher` (two live attempts of one job at one instant) and
`JobClients` (held and real running jobs, every operation recorded). `sample()` counts GPUs
that two SCHEDULED/RUNNING jobs hold at once (call it between faults). `finish(name)` stops
the clients, waits until every running job has finished, records the final listing, checks the
history with `JobStoreModel`, saves it as `<history_dir>/<name>.json` and returns the figures.

`scenario_dir(name)` is a fresh directory per scenario: a temporary one, or, with
`CHAOS_KEEP_DIR`, a new one under it that is kept for a post-mortem.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpu_platform.testing.chaos_clients import JobClients
from gpu_platform.testing.chaos_history import save_history
from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until
from gpu_platform.testing.linearizability import Verdict, check
from gpu_platform.testing.linearizability_models import JobStoreModel
from gpu_platform.testing.linearizability_report import explain
from gpu_platform.testing.netns_cluster import double_booked
from gpu_platform.testing.overlap import AttemptWatcher

WAIT = 90.0


@contextmanager
def scenario_dir(name: str) -> Iterator[Path]:
    keep = os.environ.get("CHAOS_KEEP_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=keep))
        path.chmod(0o755)  # jobs may run as an unprivileged account
        print(f"   data of {name}: {path}", flush=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=f"chaos-{name}-") as tmp:
        Path(tmp).chmod(0o755)
        yield Path(tmp)


class JobWorkload:
    def __init__(
        self, c: ReplicatedCluster, root: Path, *, seed: int, history_dir: Path, seconds: float
    ) -> None:
        self.c = c
        self.history_dir = history_dir
        # node losses re-queue it: it must not run out of attempts (its dependents would end)
        blocker = c.submit(["sleep", "3600"], gpus=1, max_attempts=100)
        if not wait_until(lambda: c.job(blocker["id"])["state"] == "RUNNING", WAIT):
            raise RuntimeError("the blocker job did not start")
        tag = f"chaos{os.getpid()}x{time.monotonic_ns() % 10**6}"
        self.watcher = AttemptWatcher(tag)
        self.watcher.start()
        self.clients = JobClients(
            c, root / "runs", blocker=blocker["id"], tag=tag, seed=seed, seconds=seconds
        ).start()
        self.gpus_held_twice = 0
        self.samples = 0
        self.frozen: list[tuple[float, float]] = []  # unix times an agent was SIGSTOPped

    def wait_acked(self, more: int) -> None:
        n = self.clients.acked_count()
        wait_until(lambda: self.clients.acked_count() >= n + more, WAIT)

    def sample(self) -> None:
        try:
            jobs = self.c.jobs()
        except Exception:  # no leader right now: no sample
            return
        self.samples += 1
        self.gpus_held_twice += len(double_booked(jobs))

    def finish(self, name: str, check_timeout_s: float) -> dict[str, Any]:
        self.clients.stop()
        finished = self.clients.wait_finished(timeout=180.0)
        self.sample()
        self.watcher.stop()
        self.clients.final_reads()
        history = self.clients.history()
        t0 = time.monotonic()
        result = check(JobStoreModel(), history, timeout_s=check_timeout_s)
        if result.verdict is Verdict.NOT_LINEARIZABLE:
            print(explain(JobStoreModel(), history, result), file=sys.stderr)
        audit = self.clients.audit(self.frozen)
        save_history(
            self.history_dir / f"{name}.json",
            model="JobStoreModel",
            records=self.clients.recorder.to_json(),
            result=result,
            extra={"audit": audit},
        )
        overlaps = self.watcher.overlaps()
        counts = self.clients.recorder.counts()
        figures = {
            "ops": len(history),
            "ops_indeterminate": counts["info"] + counts["invoke"],
            "ops_failed": counts["fail"],
            "check_s": round(time.monotonic() - t0, 2),
            "verdict": result.verdict.value,
            "histories_checked": 1,
            **{k: v for k, v in audit.items() if k != "examples"},
            "attempts_overlapping": len(overlaps),
            "process_polls": self.watcher.polls,
            "gpus_held_twice": self.gpus_held_twice,
            "gpu_samples": self.samples,
            "all_running_jobs_finished": finished,
            "history": str(self.history_dir / f"{name}.json"),
        }
        if any(audit["examples"].values()):
            figures["examples"] = audit["examples"]
        if overlaps:
            keys = {job: key for key, job in self.clients.acked.items()}
            figures["overlaps"] = [
                {
                    "job": o.job_id,
                    "epochs": list(o.epochs),
                    "at_unix": round(time.time() - time.monotonic() + o.at, 3),
                    "marks": self.clients.marks(keys.get(o.job_id, "")),
                }
                for o in overlaps[:5]
            ]
        figures["linearizable"] = (
            result.verdict is Verdict.LINEARIZABLE
            and finished
            and not audit["jobs_lost"]
            and not audit["jobs_duplicated"]
            and not audit["running_jobs_unfinished"]
            and not audit["completed_without_running"]
            and not audit["completed_twice_unexplained"]
            and not overlaps
            and not self.gpus_held_twice
        )
        return figures
