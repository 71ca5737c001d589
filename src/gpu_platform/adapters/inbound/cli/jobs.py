"""`gpu-platform jobs list|describe|logs|cancel|kill`, and waiting for a job or an array to end
(also `submit --wait`). An array's id stands for the array where a job's would.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console

from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt
from gpu_platform.adapters.inbound.cli.arrays import array_fields, group_pending_tasks
from gpu_platform.adapters.inbound.cli.client import EXIT, ApiError
from gpu_platform.adapters.inbound.cli.jobs_view import jobs_table
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt, Session, fail, when
from gpu_platform.adapters.inbound.cli.sharing_opts import gpus_text

__all__ = ["register_jobs", "wait_array", "wait_job"]

Call = Callable[..., Any]
Emit = Callable[[Output, Any], bool]


def _pending(job: dict[str, Any]) -> str:
    """Why a QUEUED job waits: `code: message` (from the last scheduling cycle)."""
    p = job.get("pending")
    if not p:
        return "-"
    return f"{p['code']}: {p['message']}"


def _gpus_of(job: dict[str, Any]) -> str:
    a = job.get("allocation")
    if not a:
        return "-"
    tasks = a.get("tasks") or [a]
    return " ".join(f"{t['node']}:{','.join(str(i) for i in t['gpu_indices'])}" for t in tasks)


def wait_job(out: Console, call: Call, server: str, job_id: str) -> Any:
    """Poll until the job has ended, with a spinner on a terminal."""

    terminal = {"COMPLETED", "FAILED", "CANCELLED"}
    with out.status(f"waiting for {job_id}...", spinner="dots"):
        while True:
            job = call(server, "GET", f"/v1/jobs/{job_id}")
            if job["state"] in terminal:
                return job
            time.sleep(0.5)


def wait_array(out: Console, call: Call, server: str, array_id: str) -> Any:
    """Poll until every task of the array has ended."""
    import time

    with out.status(f"waiting for array {array_id}...", spinner="dots"):
        while True:
            a = call(server, "GET", f"/v1/arrays/{array_id}")
            ended = sum(a["tasks_by_state"].get(s, 0) for s in ("COMPLETED", "FAILED"))
            if ended + a["tasks_by_state"].get("CANCELLED", 0) == a["count"]:
                return a
            time.sleep(0.5)


def register_jobs(
    jobs: typer.Typer, out: Console, call: Call, emit: Emit, session: Session
) -> None:
    """Add the commands of the `jobs` group; `call(server, method, path, **kw)` does HTTP;
    `emit(output, data)` prints JSON when asked."""

    def job_or_array(server: str, method: str, job_id: str, suffix: str = "") -> tuple[Any, bool]:
        """(the job's JSON, False), or for an array id (array's JSON, True)."""
        try:
            return session.client(server).json(method, f"/v1/jobs/{job_id}{suffix}"), False
        except ApiError as exc:
            if exc.exit_code != EXIT["not_found"]:
                raise fail(str(exc), exc.exit_code) from None
            try:
                return session.client(server).json(method, f"/v1/arrays/{job_id}{suffix}"), True
            except ApiError:
                raise fail(str(exc), exc.exit_code) from None

    @jobs.command("list")
    def jobs_list(
        state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
        tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs.")] = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """All jobs you may see (your tenant's; every tenant's for operators), oldest first."""
        params = {"state": state.upper()} if state else {}
        if tenant:
            params["tenant"] = tenant
        rows = call(server, "GET", "/v1/jobs", params=params)
        if emit(output, rows):
            return
        out.print(jobs_table(group_pending_tasks(rows), time.time(), max(80, out.width)))

    @jobs.command("describe")
    def jobs_describe(
        job_id: Annotated[str, typer.Argument(metavar="ID")],
        server: ServerOpt = DEFAULT_SERVER,
        tail: Annotated[int, typer.Option(help="Bytes of output to show.")] = 4096,
        output: OutputOpt = Output.table,
    ) -> None:
        """Everything about one job (GPUs, NUMA placement, history), with its output's tail;
        for a job array's id, the array (its tasks by state)."""
        j, is_array = job_or_array(server, "GET", job_id)
        if emit(output, j):
            return
        if is_array:
            for key, value in array_fields(j):
                out.print(f"{key + ':':<15} {value}", soft_wrap=True)
            return
        a = j["allocation"]
        fields = [
            ("ID", j["id"]),
            ("Name", j["name"] or "-"),
            ("State", j["state"]),
            ("Reason", j["reason"] or "-"),
            ("Waiting", _pending(j)),
            ("Priority", f"{j['priority']}" + ("" if j["preemptible"] else " (not preemptible)")),
            ("Depends on", ", ".join(j["depends_on"]) or "-"),
            ("Command", " ".join(j["command"])),
            (
                "GPUs requested",
                gpus_text(j, detail=True)
                + (f" x {j['tasks']} tasks" if j["tasks"] > 1 else "")
                + (f" (one MIG {j['mig_profile']} instance)" if j.get("mig_profile") else ""),
            ),
            ("Memory cap", "-" if j["memory_bytes"] is None else f"{j['memory_bytes']} bytes"),
            ("Time limit", "-" if j["time_limit_s"] is None else f"{j['time_limit_s']:g}s"),
            ("Tenant", j["tenant"]),
            ("User", j["user"] or "-"),
            ("Tasks", _gpus_of(j) if a and len(a["tasks"]) > 1 else "-"),
            ("Node", a["node"] if a else "-"),
            ("GPU indices", ",".join(map(str, a["gpu_indices"])) if a else "-"),
            ("GPU UUIDs", ",".join(a["gpu_uuids"]) if a else "-"),
            ("NUMA nodes", ",".join(map(str, a["numa_nodes"])) if a else "-"),
            ("Attempt", str(j["attempt"])),
            ("Faults", f"{j.get('faults', 0)} of at most {j['max_attempts']}"),
            ("Interruptions", f"{j.get('interruptions', 0)} (preemptions, restarts, not counted)"),
            ("Exit code", "-" if j["exit_code"] is None else str(j["exit_code"])),
            ("Submitted", when(j["submitted_at"])),
            ("Started", when(j["started_at"])),
            ("Finished", when(j["finished_at"])),
        ]
        width = max(len(k) for k, _ in fields)
        for key, value in fields:
            out.print(f"{key + ':':<{width + 1}} {value}", soft_wrap=True)
        out.print("History:")
        for h in j["history"]:
            out.print(f"  {when(h['at'])}  {h['state']:<10} {h['reason']}", soft_wrap=True)
        if j["attempt"]:
            try:
                text = (
                    session.client(server)
                    .request("GET", f"/v1/jobs/{job_id}/logs", params={"tail_bytes": tail})
                    .text
                )
            except ApiError as exc:
                raise fail(str(exc), exc.exit_code) from None
            out.print(f"Output (attempt {j['attempt']}):")
            sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")

    @jobs.command("logs")
    def jobs_logs(
        job_id: Annotated[str, typer.Argument(metavar="ID")],
        attempt: Annotated[
            int | None, typer.Option(help="Attempt number (default: latest).")
        ] = None,
        follow: Annotated[
            bool, typer.Option("--follow", "-f", help="Keep printing until the attempt ends.")
        ] = False,
        rank: Annotated[int, typer.Option(help="Which task of a gang (default: rank 0).")] = 0,
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Print a job's output (combined stdout and stderr)."""
        params: dict[str, Any] = {"tail_bytes": 16 << 20, "rank": rank}
        if attempt is not None:
            params["attempt"] = attempt
        try:
            client = session.client(server, timeout=None if follow else 30.0)
            if follow:
                params["follow"] = "true"
                for chunk in client.stream("GET", f"/v1/jobs/{job_id}/logs", params=params):
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                return
            text = client.request("GET", f"/v1/jobs/{job_id}/logs", params=params).text
        except ApiError as exc:
            raise fail(str(exc), exc.exit_code) from None
        sys.stdout.write(text)

    @jobs.command("cancel")
    def jobs_cancel(
        job_id: Annotated[str, typer.Argument(metavar="ID")],
        server: ServerOpt = DEFAULT_SERVER,
        wait: Annotated[bool, typer.Option("--wait", help="Wait until it has stopped.")] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Cancel a job (graceful): SIGTERM, then SIGKILL after the server's grace period.
        An array's id cancels every task of it; `ARRAY_7` cancels task 7 alone."""
        j, is_array = job_or_array(server, "POST", job_id, "/cancel")
        if is_array:
            j = wait_array(out, call, server, job_id) if wait else j
            if not emit(output, j):
                out.print(f"{j['id']} cancelled: {j['tasks_by_state']}")
            return
        j = wait_job(out, call, server, job_id) if wait else j
        if not emit(output, j):
            out.print(f"{j['id']} {j['state']}")

    @jobs.command("kill")
    def jobs_kill(
        job_id: Annotated[str, typer.Argument(metavar="ID")],
        server: ServerOpt = DEFAULT_SERVER,
        wait: Annotated[bool, typer.Option("--wait", help="Wait until it has stopped.")] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Kill a job now (SIGKILL, no grace period)."""
        j = call(server, "POST", f"/v1/jobs/{job_id}/kill")
        j = wait_job(out, call, server, job_id) if wait else j
        if not emit(output, j):
            out.print(f"{j['id']} {j['state']}")
