"""Open-loop submitter processes for `bench_cluster_offered.py` (issue 21).

`Submitters(count)` starts `count` processes (this file run as a script), once: their imports
cost CPU, so not inside a point. `offer(targets, rate, seconds, started)` runs one point: job
i is due at t0 + i/rate and is sent by process i mod count at that time (asyncio: grpc.aio, or
`_Http` for targets written `http:HOST:PORT`), whatever happened to earlier ones; each job's
due, sent and acknowledged times come back.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

IN_FLIGHT = 600  # outstanding submits per submitter beyond which a due job is refused
DRAIN_S = 10.0  # how long after the last due time submits may still be answered
COMMAND = ["fake-exit", "0"]  # ends at the agent swarm's next tick


async def _submit_share(stubs: list[Any], rate: float, n: int, me: int, of: int, t0: float) -> Any:
    """Submit jobs me, me+of, me+2*of... of `n`, job i at t0 + i/rate (Unix time), to
    stubs[0] (the leader); after a "not the leader" refusal, to the next server (a refused
    job is counted, not sent again: the offer stays open-loop)."""
    import grpc

    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb

    request = pb.SubmitJobRequest(command=COMMAND, gpus=1)
    rest = isinstance(stubs[0], _Http)
    done: list[tuple[str, float, float, float]] = []  # id, due, sent, acknowledged
    state = {"in_flight": 0, "errors": 0, "refused": 0, "target": 0, "moved": 0}
    first_error: list[str] = []

    async def one(due: float) -> None:
        state["in_flight"] += 1
        sent = time.time()
        target = state["target"]
        try:
            if rest:
                job_id = await stubs[target].submit()
            else:
                job_id = (await stubs[target].SubmitJob(request, timeout=30)).id
        except Exception as exc:  # counted: the row shows it
            state["errors"] += 1
            if not first_error:
                first_error.append(f"{type(exc).__name__}: {exc}"[:200])
            unavailable = isinstance(exc, OSError) or (  # REST: the connection refused
                isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.UNAVAILABLE
            )
            if unavailable and state["target"] == target:  # try the next server
                state["target"] = (target + 1) % len(stubs)
                state["moved"] += 1
        else:
            done.append((job_id, due, sent, time.time()))
        finally:
            state["in_flight"] -= 1

    tasks = []
    for i in range(me, n, of):
        due = t0 + i / rate
        delay = due - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if state["in_flight"] >= IN_FLIGHT:
            state["refused"] += 1
            continue
        tasks.append(asyncio.create_task(one(due)))
    end = t0 + n / rate
    pending: set[asyncio.Task[None]] = set()
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=max(0.1, end + DRAIN_S - time.time()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return {
        "jobs": done,
        "errors": state["errors"],
        "refused": state["refused"],
        "timed_out": len(pending),
        "moved": state["moved"],
        "first_error": first_error[0] if first_error else None,
    }


class _Http:
    """POST /v1/jobs over kept-alive HTTP/1.1 connections, one request at a time on each, as
    many connections as submits in flight. The job's id comes back; an answer other than 201
    raises (counted as an error by the caller)."""

    BODY = json.dumps({"command": COMMAND, "gpus": 1}).encode()

    def __init__(self, target: str) -> None:
        self.host, port = target.rsplit(":", 1)
        self.port = int(port)
        self.idle: list[tuple[Any, Any]] = []
        head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(self.BODY)}\r\n\r\n"
        )
        self.request = head.encode() + self.BODY

    async def submit(self) -> str:
        while self.idle:  # a kept connection the server closed meanwhile: EOF or a reset
            reader, writer = self.idle.pop()
            writer.write(self.request)
            try:
                status = await reader.readline()
            except ConnectionError:
                status = b""
            if status:
                return await self._answer(reader, writer, status)
            writer.close()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        writer.write(self.request)
        return await self._answer(reader, writer, await reader.readline())

    async def _answer(self, reader: Any, writer: Any, status: bytes) -> str:
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await reader.readexactly(length)
        self.idle.append((reader, writer))
        if not status.startswith(b"HTTP/1.1 201"):
            raise RuntimeError(f"{status.decode().strip()}: {body[:200]!r}")
        return str(json.loads(body)["id"])


async def _submitter(me: int, of: int) -> None:
    """A submitter process: per stdin line `leader,other,... rate n t0` (gRPC targets, or
    `http:HOST:PORT` ones), its share of the point as one JSON line (`ready` first, once
    imported)."""
    import grpc

    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc

    loop = asyncio.get_running_loop()
    channels: dict[str, Any] = {}
    print("ready", flush=True)
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        targets, rate, n, t0 = line.split()
        stubs = []
        for target in targets.split(","):
            if target.startswith("http:"):
                stubs.append(_Http(target[5:]))
                continue
            if target not in channels:  # connect before t0
                channels[target] = grpc.aio.insecure_channel(target)
                await asyncio.wait_for(channels[target].channel_ready(), 60)
            stubs.append(pb_grpc.JobServiceStub(channels[target]))
        share = await _submit_share(stubs, float(rate), int(n), me, of, float(t0))
        print(json.dumps(share), flush=True)
    for channel in channels.values():
        await channel.close()


class Submitters:
    """`count` submitter processes, started once (their imports cost CPU: not during a
    point); `offer()` runs one point through all of them."""

    def __init__(self, count: int) -> None:
        self.procs = [
            subprocess.Popen(
                [sys.executable, __file__, str(k), str(count)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for k in range(count)
        ]
        if any(self._read(p) != "ready" for p in self.procs):
            for p in self.procs:
                p.kill()
                p.wait()
            raise RuntimeError("a submitter did not start")

    @staticmethod
    def _read(p: subprocess.Popen[str]) -> str:
        assert p.stdout is not None
        return p.stdout.readline().strip()

    def offer(
        self, targets: str, rate: float, seconds: float, started: Callable[[], None]
    ) -> dict[str, Any]:
        """One point: `rate * seconds` jobs to `targets` (gRPC addresses, comma-separated, the
        leader first); merged per-job records. `started()` is called just before t0."""
        n = max(len(self.procs), round(rate * seconds))
        # a point's first jobs are due 1 s after the line is sent: a submitter connects to a
        # new target meanwhile
        started()
        t0 = time.time() + 1.0
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(f"{targets} {rate!r} {n} {t0!r}\n")
            p.stdin.flush()
        parts = [json.loads(self._read(p)) for p in self.procs]
        merged: dict[str, Any] = {"t0": t0, "end": t0 + n / rate, "offered": n, "jobs": []}
        for part in parts:
            merged["jobs"] += part["jobs"]
            for key in ("errors", "refused", "timed_out", "moved"):
                merged[key] = merged.get(key, 0) + part[key]
            merged["first_error"] = merged.get("first_error") or part["first_error"]
        return merged

    def close(self) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    asyncio.run(_submitter(int(sys.argv[1]), int(sys.argv[2])))
