"""`AgentRequests`: the hub's requests that ask one agent and wait for its answer — log
reads (the `JobRunner` port's `read_log`), GPU resets (the leader's `GpuReset` for agent nodes)
and fault scripts. A base of `AgentHub` (split from agent_hub.py): it uses the hub's sessions,
pending requests and lock, which the hub declares and owns.

Thread-safety: every public method may be called from any thread; each blocks until the agent
answers or its timeout passes, so call them off every lock.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol

from gpu_platform.application.agent_contracts import AgentSession, AgentUnavailable
from gpu_platform.ports.outbound.gpu_reset import GpuResetError
from gpu_platform.ports.outbound.job_runner import LaunchError

__all__ = ["AgentRequests"]


class _LiveSession(Protocol):
    """What a request needs of one of the hub's live streams."""

    session: AgentSession
    uuids: dict[int, str]


class AgentRequests:
    """Log reads, resets and fault scripts over the agents' streams (see the module
    docstring); the attributes below are the hub's."""

    _lock: threading.Lock
    _sessions: Mapping[str, _LiveSession]
    _logs_at: dict[tuple[str, int, int], str]
    _requests: dict[int, Future[object]]
    _asked: dict[int, AgentSession]
    _ids: itertools.count[int]
    _log_timeout: float
    _reset_timeout: float

    def _fresh(self, node: str) -> _LiveSession | None:
        raise NotImplementedError

    def read_log(self, job_id: str, attempt: int, tail_bytes: int, rank: int = 0) -> str:
        data = self._read(job_id, attempt, rank, -1, tail_bytes)
        return data.decode("utf-8", errors="replace")

    def read_log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int, rank: int = 0
    ) -> bytes:
        return self._read(job_id, attempt, rank, offset, max_bytes)

    # -- GpuReset and injection -----------------------------------------------------------

    def reset(self, node: str, gpu_index: int) -> None:
        """GpuReset for agent nodes: the node's agent resets the GPU (see the module docstring).
        Blocks up to `reset_timeout_s`; call it off every lock."""
        try:
            error = self._ask(
                node,
                lambda s, rid, uuids: s.send_reset(rid, gpu_index, uuids.get(gpu_index, "")),
                self._reset_timeout,
                "the reset",
            )
        except AgentUnavailable as exc:
            raise GpuResetError(str(exc)) from None
        if error:
            raise GpuResetError(f"agent on {node}: {error}")

    def inject(self, node: str, script: str) -> list[str]:
        """Run a fault script on `node`'s agent; the lines it scheduled. ValueError when the
        node has no live agent, it did not answer, or it refused the script."""
        try:
            lines = self._ask(
                node, lambda s, rid, _: s.send_inject(rid, script), self._log_timeout, "the script"
            )
        except AgentUnavailable as exc:
            raise ValueError(str(exc)) from None
        assert isinstance(lines, tuple)
        return list(lines)

    def _ask(
        self,
        node: str,
        send: Callable[[AgentSession, int, dict[int, str]], None],
        timeout: float,
        what: str,
    ) -> object:
        """Send one request to `node`'s live session and wait for its answer (re-raised when
        it is an exception); AgentUnavailable when there is no live session, the stream ends
        (step_down) or no answer comes within `timeout` seconds."""
        request_id = next(self._ids)
        fut: Future[object] = Future()
        with self._lock:
            live = self._fresh(node)
            if live is None:
                raise AgentUnavailable(f"node {node!r} has no connected agent")
            self._requests[request_id] = fut
            session, uuids = live.session, dict(live.uuids)
            self._asked[request_id] = session
        try:
            send(session, request_id, uuids)
            return fut.result(timeout=timeout)
        except FutureTimeout:
            raise AgentUnavailable(
                f"agent on {node} did not answer {what} in {timeout:g}s"
            ) from None
        finally:
            with self._lock:
                self._requests.pop(request_id, None)
                self._asked.pop(request_id, None)

    # -- plumbing ----------------------------------------------------------------------------

    def _read(self, job_id: str, attempt: int, rank: int, offset: int, max_bytes: int) -> bytes:
        with self._lock:
            node = self._logs_at.get((job_id, attempt, rank))
            targets = [node] if node in self._sessions else list(self._sessions)
            sessions = [(n, self._sessions[n].session) for n in targets if n is not None]
        for name, session in sessions:  # the node that ran it, else ask each agent
            request_id = next(self._ids)
            fut: Future[object] = Future()
            with self._lock:
                self._requests[request_id] = fut
            session.send_read_log(request_id, job_id, attempt, rank, offset, max_bytes)
            try:
                data = fut.result(timeout=self._log_timeout)
            except (FutureTimeout, LaunchError):
                continue
            finally:
                with self._lock:
                    self._requests.pop(request_id, None)
            if isinstance(data, bytes) and (data or name == node):
                with self._lock:
                    self._logs_at[(job_id, attempt, rank)] = name
                return data
        return b""
