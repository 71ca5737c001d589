"""`JobClients`: `make chaos`'s clients of a replicated control plane, recording every
operation (`HistoryRecorder`) for `JobStoreModel`, keyed by intended submission.

Each intended submission has a key, sent as its `Idempotency-Key` and its job name, so that a
retry after an unknown outcome cannot make a second job and a listing by name counts copies:

* a *held* job depends on `blocker` (a job that runs on), so it stays QUEUED; a client may
  cancel it once;
* a *running* job (`runs=True` in the history) is a real short command,
  `sh -c SCRIPT TAG FILE`, that appends `start <job>:<epoch> <unix time>` and, 0.5 to
  `seconds` s later, `done <job>:<epoch> <unix time>` to `FILE` (`runs_dir/<key>`): the
  server schedules, runs, re-queues and finishes it by itself.

The first try of a submit is a `submit`; every further try (any live server, same key) is a
`retry`; a try that times out or loses its connection is indeterminate (`info`). A read
answered 404 is recorded as a read that says "absent". `final_reads()` lists every job once and
records, per key, its state and how many jobs carry its name; `audit()` turns that listing and
the marker files into the figures: acknowledged jobs lost, keys with two jobs, running jobs
not finished, commands that completed twice.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

from gpu_platform.domain.model.job import TERMINAL_JOB_STATES, JobState
from gpu_platform.testing.chaos_history import HistoryRecorder
from gpu_platform.testing.linearizability import Operation
from gpu_platform.testing.linearizability_models import JobInput, JobOp, JobOutput

__all__ = ["JobClients"]

SCRIPT = (
    'echo "start $GPU_PLATFORM_ATTEMPT $(date +%s.%N)" >> "$1"; sleep {s}; '
    'echo "done $GPU_PLATFORM_ATTEMPT $(date +%s.%N)" >> "$1"'
)
MAX_ACTIVE = 12  # running jobs not yet seen finished; beyond it, submissions are held jobs
_GIVE_UP_S = 30.0  # a submit stops retrying after this long; it stays indeterminate


class _Cluster(Protocol):
    def alive(self) -> list[int]: ...
    def url(self, i: int) -> str: ...
    def jobs(self) -> list[dict[str, Any]]: ...


class JobClients:
    """`clients` threads; `run_share` of the submissions are running jobs."""

    def __init__(
        self,
        cluster: _Cluster,
        runs_dir: Path,
        *,
        blocker: str | None,
        tag: str,
        clients: int = 3,
        seed: int = 1,
        run_share: float = 0.5,
        seconds: float = 1.0,
    ) -> None:
        self._c = cluster
        self.runs_dir = runs_dir
        runs_dir.mkdir(parents=True, exist_ok=True)
        runs_dir.chmod(0o1777)  # jobs may run as an unprivileged account
        self._blocker, self.tag = blocker, tag
        self._n, self._seed, self._seconds = clients, seed, seconds
        self._run_share = run_share if blocker is not None else 1.0
        self.recorder: HistoryRecorder[JobInput, JobOutput] = HistoryRecorder()
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._threads: list[threading.Thread] = []
        self.keys: dict[str, bool] = {}  # key -> runs
        self.acked: dict[str, str] = {}  # key -> job id
        self._cancelled: set[str] = set()
        self._seen: dict[str, JobState | None] = {}  # key -> the last state a read returned
        self.final: dict[str, list[dict[str, Any]]] = {}  # key -> jobs named so, at the end

    def start(self) -> JobClients:
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(self._n)
        ]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        for t in self._threads:
            t.join(timeout=_GIVE_UP_S + 30)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def history(self) -> list[Operation[JobInput, JobOutput]]:
        return self.recorder.history()

    # -- the end ---------------------------------------------------------------------------

    def _listing(self) -> list[dict[str, Any]]:
        for _ in range(60):
            try:
                return self._c.jobs()
            except (httpx.HTTPError, IndexError):
                time.sleep(1.0)
        raise RuntimeError("could not list the jobs for a minute")

    def wait_finished(self, timeout: float) -> bool:
        """Until every acknowledged running job is terminal (False if `timeout` runs out)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = {j["id"]: j["state"] for j in self._listing()}
            with self._lock:
                ids = [self.acked[k] for k, runs in self.keys.items() if runs and k in self.acked]
            if all(states.get(i) in TERMINAL_JOB_STATES for i in ids):
                return True
            time.sleep(0.5)
        return False

    def final_reads(self) -> None:
        """One listing, recorded as a read per key: its state (None: absent) and copies."""
        with self._lock:
            keys = dict(self.keys)
        handles = {
            k: self.recorder.invoke(-1, JobInput(JobOp.GET, k, runs=r)) for k, r in keys.items()
        }
        listed = self._listing()
        by_name: dict[str, list[dict[str, Any]]] = {}
        for job in listed:
            by_name.setdefault(str(job.get("name") or ""), []).append(job)
        for key, handle in handles.items():
            found = by_name.get(key, [])
            state = JobState(found[0]["state"]) if found else None
            self.recorder.ok(handle, JobOutput(True, state, copies=len(found)))
        self.final = {k: by_name.get(k, []) for k in keys}

    def audit(self, frozen: Sequence[tuple[float, float]] = ()) -> dict[str, Any]:
        """Figures from `final_reads()` and the marker files. A command that completed twice
        is explained when all its completions but the last fall in one of the `frozen`
        windows (unix times an agent was stopped, plus the fence's few seconds): at-least-once
        (its exit was never reported, the job ran again); otherwise it is a fault."""
        lost = [k for k in self.acked if not self.final.get(k)]
        duplicated = [k for k, jobs in self.final.items() if len(jobs) > 1]
        unfinished, twice, without, unexplained, completed = [], [], [], [], 0
        for key, runs in self.keys.items():
            jobs = self.final.get(key, [])
            if not runs or not jobs:
                continue
            state = jobs[0]["state"]
            marks = Counter(line.split(" ", 1)[0] for line in self.marks(key))
            if state not in TERMINAL_JOB_STATES:
                unfinished.append(key)
            if state == "COMPLETED":
                completed += 1
                if marks["done"] == 0:
                    without.append(key)
            if marks["done"] > 1:
                twice.append(key)
                dones = [float(m.split()[2]) for m in self.marks(key) if m.startswith("done")]
                if not all(any(a <= t <= b + 5 for a, b in frozen) for t in dones[:-1]):
                    unexplained.append(key)
        return {
            "submissions": len(self.keys),
            "acknowledged_jobs": len(self.acked),
            "running_jobs_completed": completed,
            "jobs_lost": len(lost),
            "jobs_duplicated": len(duplicated),
            "running_jobs_unfinished": len(unfinished),
            "commands_completed_twice": len(twice),
            "completed_twice_unexplained": len(unexplained),
            "completed_without_running": len(without),
            "examples": {
                "lost": lost[:5],
                "duplicated": duplicated[:5],
                "twice": {k: self.marks(k) for k in twice[:5]},
            },
        }

    def marks(self, key: str) -> list[str]:
        """The marker lines of `key`'s running job (none for a held job)."""
        path = self.runs_dir / key
        return path.read_text().splitlines() if path.exists() else []

    # -- the clients -----------------------------------------------------------------------

    def _urls(self, n: int) -> list[str]:
        alive = self._c.alive()
        return [self._c.url(alive[(n + k) % len(alive)]) for k in range(len(alive))]

    def _submit(self, http: httpx.Client, me: int, n: int, runs: bool, secs: float) -> None:
        key = f"chaos-{self.tag}-{me}-{n}"
        with self._lock:
            self.keys[key] = runs
        if runs:
            script = SCRIPT.format(s=secs)
            body: dict[str, Any] = {
                "command": ["sh", "-c", script, self.tag, str(self.runs_dir / key)]
            }
        else:
            body = {"command": ["true"], "depends_on": [self._blocker]}
        body |= {"gpus": 1, "name": key}
        headers = {"Idempotency-Key": key}
        op, t0, tries = JobOp.SUBMIT, time.monotonic(), 0
        while True:
            urls = self._urls(n + tries)
            tries += 1
            h = self.recorder.invoke(me, JobInput(op, key, runs=runs))
            op = JobOp.RETRY
            try:
                r = http.post(urls[0] + "/v1/jobs", json=body, headers=headers)
            except (httpx.HTTPError, IndexError):
                self.recorder.info(h)
            else:
                if r.status_code in (200, 201):
                    self.recorder.ok(h, JobOutput(True))
                    with self._lock:
                        self.acked[key] = str(r.json()["id"])
                    return
                if 400 <= r.status_code < 500 and r.status_code not in (408, 421, 429):
                    self.recorder.fail(h)  # refused: nothing was created
                    return
                self.recorder.info(h)
            if time.monotonic() - t0 > _GIVE_UP_S:
                return  # indeterminate for good: the final listing decides
            time.sleep(min(1.0, 0.05 * 2**tries))  # few pending tries per key: a cheap check

    def _loop(self, me: int) -> None:
        http = httpx.Client(timeout=5.0, follow_redirects=True)
        rng = random.Random(self._seed * 1000 + me)
        n = 0
        try:
            while not self._halt.is_set():
                n += 1
                with self._lock:
                    acked = list(self.acked)
                    active = sum(  # running jobs not yet seen finished (bounds the queue)
                        1
                        for k in acked
                        if self.keys[k] and self._seen.get(k) not in TERMINAL_JOB_STATES
                    )
                if not acked or rng.random() < 0.15:
                    runs = rng.random() < self._run_share and active < MAX_ACTIVE
                    secs = round(rng.uniform(0.5, max(0.5, self._seconds)), 1)
                    self._submit(http, me, n, runs, secs)
                    continue
                key = rng.choice(acked)
                with self._lock:
                    runs, job_id = self.keys[key], self.acked[key]
                    cancel = not runs and key not in self._cancelled and rng.random() < 0.3
                    if cancel:
                        self._cancelled.add(key)
                self._read_or_cancel(http, me, n, key, job_id, runs, cancel)
                self._halt.wait(0.05)
        finally:
            http.close()

    def _read_or_cancel(
        self, http: httpx.Client, me: int, n: int, key: str, job_id: str, runs: bool, cancel: bool
    ) -> None:
        op = JobOp.CANCEL if cancel else JobOp.GET
        h = self.recorder.invoke(me, JobInput(op, key, runs=runs))
        try:
            url = self._urls(n)[0] + f"/v1/jobs/{job_id}"
            r = http.post(url + "/cancel", json={}) if cancel else http.get(url)
        except (httpx.HTTPError, IndexError):
            (self.recorder.info if cancel else self.recorder.fail)(h)
            return
        if not cancel and r.status_code in (200, 404):  # 404: a read that says "absent"
            state = JobState(r.json()["state"]) if r.status_code == 200 else None
            self.recorder.ok(h, JobOutput(True, state))
            with self._lock:
                self._seen[key] = state
        elif cancel and r.status_code in (200, 404, 409):
            self.recorder.ok(h, JobOutput(r.status_code == 200))
        else:
            (self.recorder.info if cancel else self.recorder.fail)(h)
