"""`gpu-platform submit`: a job or a job array from the command line (GPUs or a share of one,
gangs, placement wishes, limits, a container image), optionally waiting until it has ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console

from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt
from gpu_platform.adapters.inbound.cli.client import ApiError
from gpu_platform.adapters.inbound.cli.jobs import wait_array, wait_job
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt, Session, fail
from gpu_platform.adapters.inbound.cli.submit_body import (
    Affinity,
    parse_duration,
    parse_size,
    submit_body,
)

__all__ = ["Affinity", "parse_duration", "parse_size", "register_submit"]

Call = Callable[..., Any]
Emit = Callable[[Output, Any], bool]


def register_submit(
    app: typer.Typer, out: Console, call: Call, emit: Emit, session: Session
) -> None:
    """Add `submit` to `app`; `call(server, method, path, **kw)` does HTTP; `emit(output,
    data)` prints JSON when asked."""

    @app.command(context_settings={"allow_interspersed_args": False})
    def submit(
        command: Annotated[list[str], typer.Argument(help="The program and its arguments.")],
        gpus: Annotated[
            str, typer.Option(help="GPUs per task: whole (2) or a share of one GPU (0.25).")
        ] = "0",
        gpu_memory: Annotated[
            str | None,
            typer.Option(help="A share's pinned GPU memory (MPS limit), e.g. 10G."),
        ] = None,
        cpus: Annotated[str | None, typer.Option(help="CPUs per task, e.g. 4 or 0.5.")] = None,
        vendor: Annotated[str | None, typer.Option(help="GPU vendor: nvidia, amd, intel.")] = None,
        sharing: Annotated[
            str | None,
            typer.Option(help="A share runs under mps or timeslice (default: mps on NVIDIA)."),
        ] = None,
        tasks: Annotated[
            int, typer.Option(help="Tasks of a gang: all start together (RANK, WORLD_SIZE...).")
        ] = 1,
        name: Annotated[str, typer.Option(help="A name for humans.")] = "",
        env: Annotated[
            list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")
        ] = None,
        priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
        preemptible: Annotated[
            bool,
            typer.Option(
                "--preemptible/--no-preemptible", help="May be re-queued for higher priority."
            ),
        ] = True,
        after: Annotated[
            list[str] | None,
            typer.Option("--after", help="Start only after this job COMPLETED (repeatable)."),
        ] = None,
        gpu_model: Annotated[
            list[str] | None,
            typer.Option(
                "--gpu-model", help="Accepted GPU model, as `gpus` lists it (repeatable)."
            ),
        ] = None,
        mig: Annotated[
            str | None,
            typer.Option(
                "--mig", help="One MIG instance of this profile (e.g. 1g.10gb); implies --gpus 1."
            ),
        ] = None,
        nvlink: Annotated[
            Affinity, typer.Option(help="GPUs of a task all NVLink-connected.")
        ] = Affinity.preferred,
        numa: Annotated[Affinity, typer.Option(help="GPUs of a task on one NUMA node.")] = (
            Affinity.preferred
        ),
        same_rack: Annotated[
            Affinity, typer.Option(help="Nodes of a gang under one rack label.")
        ] = Affinity.preferred,
        tenant: Annotated[str | None, typer.Option(help="Default: your token's tenant.")] = None,
        cwd: Annotated[str | None, typer.Option(help="Working directory on the node.")] = None,
        image: Annotated[
            str | None,
            typer.Option(help="Run the command in this container image (the node's runtime)."),
        ] = None,
        mount: Annotated[
            list[str] | None,
            typer.Option(
                "--mount", help="HOST:CONTAINER[:ro] bind mount, with --image (repeatable)."
            ),
        ] = None,
        memory: Annotated[
            str | None, typer.Option(help="Host memory cap, e.g. 512M, 4G (binary units).")
        ] = None,
        time_limit: Annotated[
            str | None, typer.Option(help="Run-time limit per attempt: SECONDS or [HH:]MM:SS.")
        ] = None,
        user: Annotated[str | None, typer.Option(help="Run as this account on the node.")] = None,
        max_attempts: Annotated[
            int,
            typer.Option(
                help="Faults (GPU, XID, node loss) before the job ends FAILED; preemptions "
                "and restarts do not count."
            ),
        ] = 3,
        retry_backoff: Annotated[
            float, typer.Option(help="Seconds before a re-queued attempt, doubled per attempt.")
        ] = 0.0,
        array: Annotated[
            str | None,
            typer.Option(
                "--array",
                "-a",
                help="A job array, Slurm's syntax: 0-999, 1,3,5, 0-15:4, then %N to run at "
                "most N tasks at once. Each task gets ARRAY_TASK_ID (and SLURM_ARRAY_TASK_ID).",
            ),
        ] = None,
        server: ServerOpt = DEFAULT_SERVER,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the id.")] = False,
        wait: Annotated[
            bool, typer.Option("--wait", help="Wait (with a spinner) until the job has ended.")
        ] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Submit a job: gpu-platform submit --gpus 2 -- python3 train.py --epochs 3"""
        try:
            body = submit_body(
                command=command,
                gpus=gpus,
                gpu_memory=gpu_memory,
                cpus=cpus,
                vendor=vendor,
                sharing=sharing,
                tasks=tasks,
                name=name,
                env=env,
                priority=priority,
                preemptible=preemptible,
                after=after,
                gpu_model=gpu_model,
                mig=mig,
                nvlink=nvlink,
                numa=numa,
                same_rack=same_rack,
                tenant=tenant,
                cwd=cwd,
                image=image,
                mount=mount,
                memory=memory,
                time_limit=time_limit,
                user=user,
                max_attempts=max_attempts,
                retry_backoff=retry_backoff,
            )
        except ValueError as exc:
            raise fail(str(exc), 2) from None
        if array is not None:
            made = call(server, "POST", "/v1/arrays", json={**body, "array": array})
            made = wait_array(out, call, server, made["id"]) if wait else made
            if not emit(output, made):
                line = f"submitted array {made['id']}: {made['count']} tasks ({made['array']})"
                out.print(made["id"] if quiet else line)
            return
        try:
            job = session.client(server).submit(body)
        except ApiError as exc:
            raise fail(str(exc), exc.exit_code) from None
        if wait:
            job = wait_job(out, call, server, job["id"])
        if not emit(output, job):
            out.print(job["id"] if quiet else f"submitted {job['id']} ({job['state']})")
        if wait and job["state"] != "COMPLETED":  # as srun: the job's failure is the exit status
            code = job.get("exit_code")
            raise typer.Exit(code if isinstance(code, int) and 0 < code < 256 else 1)
