"""The cluster state as a Raft state machine (issue 10).

Theory of operation: a proposer wraps a command in an envelope, `{"id": <command id>, "cmd":
<encode_command(cmd)>}` as canonical JSON (`encode`), and proposes the bytes. Every replica
applies committed entries in log order (`apply`) to its own `ClusterState`, so all replicas
hold the same state. Refusals are results, not exceptions: a command the domain refuses
returns `Applied((), error)`, and a malformed entry (bad JSON, unknown type) returns
`Applied((), InvalidRequest("entry", ...))` and is logged — every replica decides the same
way, so state never diverges and the applier thread (`raft_applier`) never sees an exception.

Idempotence: a client that retries after a lost reply re-proposes the same command id. The
replica remembers the last `remember` ids it applied (FIFO); an id seen before is not applied
again: `apply` returns the first result (flagged `duplicate`). Snapshots carry the ids but not
their results, so after a restore a remembered duplicate returns `Applied((), duplicate=True)`.

Snapshots are canonical JSON (sorted keys, no spaces): `{"v": 1, "applied_index": ...,
"state": encode_state(...), "seen": [ids, oldest first]}`; two replicas that applied the same
log produce identical bytes. `restore(b"")` is the empty cluster. The nodes and jobs are
encoded one at a time (same bytes as one `json.dumps`), and `snapshot_chunks` hands the pieces
over as they are made, so that a storage writes them out instead of holding the whole: at
100,000 jobs the snapshot is ~80 MiB, and holding every job's dict as well would double the
leader's memory while it snapshots (issue 21). The bytes of runs of jobs (and nodes) are kept
compressed from one snapshot to the next and reused while they are the same objects
(`snapshot_encoding`): a snapshot then encodes mostly what changed since the last one.

A replica that encoded an entry itself (the leader that proposed it) applies the command it
encoded instead of decoding the bytes again (the codec round-trips exactly:
`tests/unit/test_cluster_codec.py`); every other replica, and a restart's replay, decodes.

Thread-safety: `apply`, `snapshot` and `restore` take `lock`; readers of `state` and
`applied_index` hold it too. `on_applied` runs under the lock after each apply.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from gpu_platform.application.snapshot_encoding import (
    EncodedSegments,
    Fields,
    Items,
    canonical,
    pieces,
)
from gpu_platform.domain.cluster_codec import (
    decode_command,
    decode_state,
    encode_command,
    encode_node,
    encode_state_but_jobs,
)
from gpu_platform.domain.cluster_state import ClusterState, Command
from gpu_platform.domain.errors import DomainError, InvalidRequest
from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model_codec import job_to_dict

__all__ = ["SNAPSHOT_VERSION", "Applied", "ClusterReplica"]

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
_KEEP_PROPOSED = 65_536  # encoded entries kept until applied (a lost lead leaves some behind)


@dataclass(frozen=True, slots=True)
class Applied:
    """What `apply` hands the proposer: the command's events, or the domain's refusal
    (`error`, never raised on the applier thread). `duplicate` is True when the command id had
    already been applied and this is the remembered result (events may then be empty: results
    are not kept across snapshots)."""

    events: tuple[DomainEvent, ...]
    error: DomainError | None = None
    duplicate: bool = False


def _decode(data: bytes) -> tuple[str, Command]:
    """(command id, command) of an entry's bytes; raises on a malformed one."""
    envelope = json.loads(data)
    command_id = envelope["id"]
    if not isinstance(command_id, str) or not command_id:
        raise ValueError("envelope id must be a non-empty string")
    return command_id, decode_command(envelope["cmd"])


class ClusterReplica:
    """Implements the Raft `StateMachine` protocol over a `ClusterState` (module docstring)."""

    def __init__(
        self,
        policy: FaultPolicy,
        lock: threading.RLock,
        on_applied: Callable[[int, Command, Applied], None] | None = None,
        remember: int = 100_000,
    ) -> None:
        if remember < 0:
            raise ValueError(f"remember must be >= 0, got {remember}")
        self.policy = policy
        self.lock = lock
        self.on_applied = on_applied
        self.remember = remember
        self.state = ClusterState.empty(policy)
        self.applied_index = 0
        self._seen: OrderedDict[str, Applied] = OrderedDict()
        self._proposed: dict[bytes, tuple[str, Command]] = {}  # encoded here, not applied yet
        self._jobs = EncodedSegments(job_to_dict)  # kept between snapshots
        self._nodes = EncodedSegments(encode_node, size=16)

    def encode(self, command: Command, command_id: str) -> bytes:
        """The log entry for `command`; `command_id` identifies it across retries."""
        if not command_id:
            raise ValueError("command_id must be non-empty")
        data = canonical({"id": command_id, "cmd": encode_command(command)})
        proposed = self._proposed
        if len(proposed) >= _KEEP_PROPOSED:
            proposed.clear()  # entries whose apply never came here: they are decoded if it does
        proposed[data] = (command_id, command)
        return data

    def apply(self, index: int, data: bytes) -> Applied:
        """Apply the entry at `index`; never raises for refused or malformed commands."""
        with self.lock:
            self.applied_index = index
            mine = self._proposed.pop(data, None)
            if mine is not None:
                command_id, command = mine
            else:
                try:
                    command_id, command = _decode(data)
                except (ValueError, KeyError, TypeError, DomainError) as exc:
                    log.warning("malformed raft entry %d ignored: %s", index, exc)
                    return Applied((), InvalidRequest("entry", f"malformed log entry: {exc}"))
            first = self._seen.get(command_id)
            if first is not None:
                result = replace(first, duplicate=True)
            else:
                try:
                    result = Applied(tuple(self.state.apply(command)))
                except DomainError as exc:
                    result = Applied((), exc)
                self._remember(command_id, result)
            if self.on_applied is not None:
                self.on_applied(index, command, result)
            return result

    def _remember(self, command_id: str, result: Applied) -> None:
        if self.remember == 0:
            return
        self._seen[command_id] = result
        while len(self._seen) > self.remember:
            self._seen.popitem(last=False)

    def snapshot(self) -> bytes:
        """The whole replicated state as canonical bytes (module docstring)."""
        return b"".join(self.snapshot_chunks())

    def snapshot_chunks(self) -> Iterator[bytes]:
        """`snapshot()` in pieces, encoded as they are taken (a storage writes them out one
        by one). Holds `lock` until exhausted or closed: consume it on one thread."""
        with self.lock:
            head, nodes, jobs = encode_state_but_jobs(self.state)
            record = Fields(
                v=SNAPSHOT_VERSION,
                applied_index=self.applied_index,
                state=Fields(
                    head,
                    nodes=Items(nodes, self._nodes),
                    jobs=Items(jobs, self._jobs),
                ),
                seen=Items(self._seen),
            )
            yield from pieces(record)

    def restore(self, data: bytes) -> None:
        """Replace the state with snapshot `data` (b"": the empty cluster); raises ValueError
        on a snapshot this version cannot read."""
        with self.lock:
            self._jobs.clear()
            self._nodes.clear()
            if not data:
                self.state = ClusterState.empty(self.policy)
                self.applied_index = 0
                self._seen = OrderedDict()
                return
            record: dict[str, Any] = json.loads(data)
            if record.get("v") != SNAPSHOT_VERSION:
                raise ValueError(f"snapshot version {record.get('v')!r} is not {SNAPSHOT_VERSION}")
            state = decode_state(record["state"], self.policy)
            restored = Applied((), duplicate=True)
            seen = OrderedDict((str(i), restored) for i in record["seen"])
            self.state = state
            self.applied_index = int(record["applied_index"])
            self._seen = seen
