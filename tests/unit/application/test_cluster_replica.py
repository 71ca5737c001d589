"""ClusterReplica: envelopes, refusals as results, dedupe window, hooks, snapshots."""

from __future__ import annotations

import json
import threading

import pytest

from gpu_platform.application.cluster_replica import Applied, ClusterReplica
from gpu_platform.domain.cluster_state import (
    ClusterState,
    Command,
    NodeHeartbeat,
    RegisterNode,
    SetQuota,
    SubmitJob,
)
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.events import JobSubmitted, QuotaChanged
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.scheduling.model import Quota

NODE = Node("n0", (Gpu("A", 0, "n0", Vendor.NVIDIA, "A100", 1 << 30),))


def make(**kw: object) -> ClusterReplica:
    return ClusterReplica(FaultPolicy(), threading.RLock(), **kw)  # type: ignore[arg-type]


def test_the_envelope_is_canonical_json_with_the_command_id() -> None:
    r = make()
    data = r.encode(NodeHeartbeat("n0", 1.0), "id-1")
    assert json.loads(data) == {
        "id": "id-1",
        "cmd": {"v": 1, "type": "NodeHeartbeat", "node": "n0", "now": 1.0},
    }
    assert data == r.encode(NodeHeartbeat("n0", 1.0), "id-1")
    with pytest.raises(ValueError, match="command_id"):
        r.encode(NodeHeartbeat("n0", 1.0), "")


def test_a_refused_command_is_returned_not_raised() -> None:
    r = make()
    applied = r.apply(1, r.encode(NodeHeartbeat("ghost", 1.0), "x"))
    assert applied.events == ()
    assert isinstance(applied.error, NotFound)
    assert r.applied_index == 1


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"cmd": {}}',
        b'{"id": "x", "cmd": {"v": 1, "type": "Explode"}}',
        b'{"id": 7, "cmd": {"v": 1, "type": "CheckNodes", "now": 1}}',
        b"\xff\xfe",
    ],
)
def test_a_malformed_entry_is_an_invalid_request_and_changes_nothing(data: bytes) -> None:
    r = make()
    before = r.snapshot()
    applied = r.apply(1, data)
    assert applied.events == ()
    assert isinstance(applied.error, InvalidRequest)
    assert applied.error.field == "entry"
    assert json.loads(r.snapshot())["state"] == json.loads(before)["state"]


def test_a_duplicate_id_returns_the_first_result_without_applying_again() -> None:
    r = make()
    r.apply(1, r.encode(RegisterNode(NODE, 0.0), "reg"))
    submit = r.encode(SubmitJob("j", JobSpec(("x",), gpus=1), 1.0), "sub")
    first = r.apply(2, submit)
    again = r.apply(3, submit)
    assert first == Applied((JobSubmitted("j", 1),))
    assert again == Applied((JobSubmitted("j", 1),), duplicate=True)
    assert len(r.state.jobs()) == 1
    # the same command under a new id is a new command, refused by the domain
    assert isinstance(
        r.apply(4, r.encode(SubmitJob("j", JobSpec(("x",)), 1.0), "s2")).error, Conflict
    )


def test_only_the_last_remembered_ids_are_deduplicated() -> None:
    r = make(remember=2)
    for i, tenant in enumerate(["a", "b", "c"], start=1):
        r.apply(i, r.encode(SetQuota(tenant, Quota(1)), tenant))
    assert json.loads(r.snapshot())["seen"] == ["b", "c"]
    assert r.apply(4, r.encode(SetQuota("c", Quota(1)), "c")).duplicate
    assert not r.apply(5, r.encode(SetQuota("a", Quota(1)), "a")).duplicate


def test_dedupe_survives_a_snapshot_and_restore() -> None:
    r = make()
    data = r.encode(SetQuota("t", Quota(2)), "q")
    r.apply(1, data)
    other = make()
    other.restore(r.snapshot())
    assert other.apply(2, data) == Applied((), duplicate=True)
    assert other.state.quotas == {"t": Quota(2)}


def test_on_applied_sees_every_command_under_the_lock() -> None:
    lock = threading.RLock()
    seen: list[tuple[int, Command, Applied, bool]] = []

    def hook(index: int, command: Command, applied: Applied) -> None:
        free: list[bool] = []

        def probe() -> None:  # another thread cannot take the lock while apply holds it
            got = lock.acquire(blocking=False)
            free.append(got)
            if got:
                lock.release()

        t = threading.Thread(target=probe)
        t.start()
        t.join()
        seen.append((index, command, applied, not free[0]))

    r = ClusterReplica(FaultPolicy(), lock, on_applied=hook)
    cmd = SetQuota("t", Quota(1))
    r.apply(7, r.encode(cmd, "a"))
    assert seen == [(7, cmd, Applied((QuotaChanged("t", Quota(1)),)), True)]


def test_restoring_nothing_gives_the_empty_cluster() -> None:
    r = make()
    r.apply(1, r.encode(RegisterNode(NODE, 0.0), "reg"))
    r.restore(b"")
    assert r.state.nodes == ()
    assert r.applied_index == 0
    assert r.snapshot() == make().snapshot()


def test_a_snapshot_of_another_version_is_refused() -> None:
    with pytest.raises(ValueError, match="version"):
        make().restore(b'{"v": 99}')


def test_replicas_that_applied_the_same_log_have_identical_snapshot_bytes() -> None:
    a, b = make(), make()
    log = [
        a.encode(RegisterNode(NODE, 0.0), "1"),
        a.encode(SetQuota("z", Quota(1)), "2"),
        a.encode(SetQuota("a", Quota(3)), "3"),
        a.encode(SubmitJob("j", JobSpec(("x",), gpus=1), 1.0), "4"),
    ]
    for i, e in enumerate(log, start=1):
        a.apply(i, e)
        b.apply(i, e)
    assert a.snapshot() == b.snapshot()
    text = a.snapshot().decode()
    assert json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) == text
    assert isinstance(a.state, ClusterState)
