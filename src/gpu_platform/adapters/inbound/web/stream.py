"""The dashboard's live parts: one server-sent-events stream per open page, and a job's log.

    GET /ui/events           text/event-stream of the EventHub's domain events
    GET /ui/jobs/{id}/log    text/plain: the latest attempt's log, followed until it ends

Each domain event becomes one SSE event named by what it changes: `job` (any event of a job
the visitor may see; data: {"type", "job_id"}), `gpu` (a GPU or node event; data: {"type",
"node"}) or `cluster` (quotas, servers). The first event, `hello`, and `resync` (after the
visitor's queue overflowed) tell the page to refresh everything: an event published between
rendering the page and subscribing is not lost. Pages swap fragments on these events (htmx
`hx-trigger="sse:job"`); nothing polls from the browser.
"""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from gpu_platform.adapters.inbound.web.site import Site, Visitor
from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.model.tenancy import Permission

__all__ = ["POLL_S", "classify", "sse", "stream_router"]

POLL_S = 0.1  # how often a stream checks its queue (server side)
KEEPALIVE_S = 15.0
LOG_CHUNK = 65536


def classify(event: DomainEvent) -> tuple[str, dict[str, str]]:
    """The SSE event name and data of a domain event."""
    kind = type(event).__name__
    job_id = getattr(event, "job_id", None)
    if job_id:
        return "job", {"type": kind, "job_id": str(job_id)}
    node = getattr(event, "node", None)
    if node:
        return "gpu", {"type": kind, "node": str(node)}
    return "cluster", {"type": kind}


def sse(name: str, data: dict[str, str]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def stream_router(site: Site) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/ui/events")
    async def events(request: Request) -> Response:
        async def build(v: Visitor) -> Response:
            source = site.events
            if source is None:
                return site.error(404, "No live events", "this server has no event source")

            everyone = v.may(Permission.JOBS_ANY_TENANT)
            seen: dict[str, bool] = {}  # a job's tenant never changes: ask once per job

            def visible(job_id: str) -> bool:
                if everyone:
                    return True
                if job_id not in seen:
                    try:
                        v.jobs.get(job_id)
                        seen[job_id] = True
                    except NotFound:
                        seen[job_id] = False
                return seen[job_id]

            async def stream() -> AsyncIterator[str]:
                with source.subscribe() as q:
                    yield "retry: 2000\n" + sse("hello", {"type": "hello"})
                    idle = 0.0
                    while not await request.is_disconnected():
                        try:
                            event = q.get_nowait()
                        except queue.Empty:
                            await asyncio.sleep(POLL_S)
                            idle += POLL_S
                            if idle >= KEEPALIVE_S:
                                idle = 0.0
                                yield ": keepalive\n\n"
                            continue
                        if event is None:
                            yield sse("resync", {"type": "resync"})
                            continue
                        name, data = classify(event)
                        job_id = data.get("job_id", "")
                        if name == "job" and not await run_in_threadpool(visible, job_id):
                            continue
                        idle = 0.0
                        yield sse(name, data)

            return StreamingResponse(
                stream(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )

        return await site.guard(request, build, page=False)

    @router.get("/ui/jobs/{job_id}/log")
    async def log(request: Request, job_id: str) -> Response:
        async def build(v: Visitor) -> Response:
            job = await run_in_threadpool(v.jobs.get, job_id)
            while job.attempt == 0 and not job.terminal:  # not started: wait for it
                if await request.is_disconnected():
                    return PlainTextResponse("")
                await asyncio.sleep(0.2)
                job = await run_in_threadpool(v.jobs.get, job_id)
            attempt = job.attempt
            if attempt == 0:
                return PlainTextResponse("")
            await run_in_threadpool(v.jobs.log_from, job_id, attempt, 0, 0)  # 404 early

            async def follow() -> AsyncIterator[bytes]:
                offset = 0
                while not await request.is_disconnected():
                    chunk, live = await run_in_threadpool(
                        v.jobs.log_from, job_id, attempt, offset, LOG_CHUNK
                    )
                    if chunk:
                        offset += len(chunk)
                        yield chunk
                    elif not live:
                        return
                    else:
                        await asyncio.sleep(0.2)

            return StreamingResponse(
                follow(),
                media_type="text/plain; charset=utf-8",
                headers={"Cache-Control": "no-store", "X-Attempt": str(attempt)},
            )

        return await site.guard(request, build, page=False)

    return router
