"""Membership changes as the Raft driver proposes and applies them (pure helpers).

Theory of operation. A membership change is a `ConfChange` entry in the Raft log; the core
applies it when it commits (`RawNode.apply_conf_change`). Raft itself knows node ids only, so
the address of a new server travels in `ConfChange.context` as `"ID=HOST:PORT[,...]"` and every
node, applying the entry, hands it to its transport (`RaftTransport.add_peer`); a removed
node's address is dropped (`remove_peer`).

The core silently replaces a conf change it will not take (another one still pending, or the
wrong kind for a joint configuration) by an empty entry; the driver checks first, on the Raft
loop, with `refusal(raft, change)`, so the caller gets a reason instead:

* `PENDING` — a change is proposed but not applied yet (or the configuration is joint): one
  membership change at a time;
* any other string — the change is invalid in the current configuration (adding a voter that
  already votes, removing a non-member, removing the last voter, ...).

Addresses also travel in snapshots: a node that catches up by snapshot, or restarts from one,
never sees the conf entries folded into it. So the driver stores its snapshots as
`wrap_snapshot(addresses, data)` — a magic line, the members' addresses as one JSON line, then
the state machine's bytes — and `unwrap_snapshot` gives both back (bytes without the magic,
such as the bootstrap snapshot's b"", are all state machine data).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from gpu_platform.domain.consensus import (
    ConfChange,
    ConfChangeError,
    ConfChangeSingle,
    ConfChangeType,
    Raft,
)
from gpu_platform.domain.consensus.confchange import Changer

__all__ = [
    "PENDING",
    "add_voter_change",
    "check_address",
    "decode_addresses",
    "encode_addresses",
    "refusal",
    "remove_voter_change",
    "snapshot_header",
    "unwrap_snapshot",
    "wrap_snapshot",
]

PENDING = "a membership change is already in progress; retry once it is applied"
SNAPSHOT_MAGIC = b"gpu-platform raft snapshot v1\n"


def wrap_snapshot(addresses: Mapping[int, str], data: bytes) -> bytes:
    """The stored form of a snapshot: `addresses` of the members, then the machine's `data`."""
    return snapshot_header(addresses) + data


def snapshot_header(addresses: Mapping[int, str]) -> bytes:
    """What `wrap_snapshot` puts before the machine's data (for writing it in pieces)."""
    book = json.dumps({str(i): a for i, a in sorted(addresses.items())}, separators=(",", ":"))
    return SNAPSHOT_MAGIC + book.encode() + b"\n"


def unwrap_snapshot(raw: bytes) -> tuple[dict[int, str], bytes]:
    """(addresses, state machine data) of a stored snapshot; raises ValueError if damaged."""
    if not raw.startswith(SNAPSHOT_MAGIC):
        return {}, raw
    book, sep, data = raw[len(SNAPSHOT_MAGIC) :].partition(b"\n")
    if not sep:
        raise ValueError("raft snapshot: the address line is not terminated")
    return {int(i): str(a) for i, a in json.loads(book).items()}, data


def encode_addresses(addresses: Mapping[int, str]) -> bytes:
    """{4: "10.0.0.4:7000"} -> b"4=10.0.0.4:7000" (the `ConfChange.context` form)."""
    for node_id, address in addresses.items():
        check_address(node_id, address)
    return ",".join(f"{i}={a}" for i, a in sorted(addresses.items())).encode()


def decode_addresses(context: bytes) -> dict[int, str]:
    """The inverse of `encode_addresses`; b"" -> {}. Raises ValueError when malformed."""
    out: dict[int, str] = {}
    for part in filter(None, context.decode().split(",")):
        node, sep, address = part.partition("=")
        if not sep or not address:
            raise ValueError(f"conf change context {part!r} is not ID=HOST:PORT")
        out[int(node)] = address
    return out


def check_address(node_id: int, address: str) -> None:
    """Raise ValueError naming the field when `node_id` / `address` cannot be used."""
    if node_id <= 0:
        raise ValueError(f"node_id: must be a positive integer, got {node_id}")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or any(c in address for c in ",= \t\n"):
        raise ValueError(f"address: {address!r} is not HOST:PORT")


def add_voter_change(node_id: int, address: str) -> ConfChange:
    """A change adding voter `node_id`, reachable at `address` (HOST:PORT)."""
    change = ConfChangeSingle(ConfChangeType.ADD_NODE, node_id)
    return ConfChange((change,), context=encode_addresses({node_id: address}))


def remove_voter_change(node_id: int) -> ConfChange:
    """A change removing `node_id` (a voter or a learner)."""
    if node_id <= 0:
        raise ValueError(f"node_id: must be a positive integer, got {node_id}")
    return ConfChange((ConfChangeSingle(ConfChangeType.REMOVE_NODE, node_id),))


def refusal(raft: Raft, change: ConfChange) -> str | None:
    """Why the leader `raft` cannot take `change` now (`PENDING` or a reason), or None.

    Mirrors the core's own checks (`leader._propose`) and dry-runs the change on a copy of the
    configuration, so a change that passes here applies cleanly on every node.
    """
    cfg = raft.prs.config
    if raft.pending_conf_index > raft.raft_log.applied:
        return PENDING
    if cfg.voters.is_joint() != change.leave_joint():
        return PENDING if cfg.voters.is_joint() else "not in a joint configuration"
    voters = set(cfg.voters.incoming)
    members = set(raft.prs.progress)
    for c in change.changes:
        if c.type is ConfChangeType.ADD_NODE and c.node_id in voters:
            return f"node {c.node_id} is already a voter"
        if c.type is ConfChangeType.REMOVE_NODE and c.node_id not in members:
            return f"node {c.node_id} is not a member"
    try:
        decode_addresses(change.context)
    except ValueError as exc:
        return str(exc)
    changer = Changer(cfg, raft.prs.progress, raft.raft_log.last_index(), raft.prs.max_inflight)
    try:
        if change.leave_joint():
            changer.leave_joint()
        else:
            joint, auto_leave = change.enter_joint()
            if joint:
                changer.enter_joint(auto_leave, change.changes)
            else:
                changer.simple(change.changes)
    except ConfChangeError as exc:
        return str(exc)
    return None
