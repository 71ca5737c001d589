"""Run-as grants as cluster-state commands (issue 20.4): set, replace, delete, refusals by
field, and the snapshot round trip."""

from __future__ import annotations

import json

import pytest

from gpu_platform.domain.access_state import (
    DeleteRunAsGrant,
    RunAsGrantDeleted,
    RunAsGrantSet,
    SetRunAsGrant,
)
from gpu_platform.domain.cluster_codec import decode_state, encode_state
from gpu_platform.domain.cluster_state import ClusterState
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.run_as import RunAsGrant


def test_a_grant_is_set_normalized_replaced_and_deleted_once() -> None:
    s = ClusterState.empty()
    assert s.apply(SetRunAsGrant("team-a", ("bob", "alice", "bob"))) == [RunAsGrantSet("team-a")]
    assert s.run_as_grants() == {"team-a": RunAsGrant("team-a", ("alice", "bob"))}
    s.apply(SetRunAsGrant("team-a", ("carol",)))
    assert s.run_as_grants() == {"team-a": RunAsGrant("team-a", ("carol",))}
    assert s.apply(DeleteRunAsGrant("team-a")) == [RunAsGrantDeleted("team-a")]
    assert s.apply(DeleteRunAsGrant("team-a")) == []
    assert s.run_as_grants() == {}


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (SetRunAsGrant("team-a", ("root",)), "accounts"),
        (SetRunAsGrant("team-a", ()), "accounts"),
        (SetRunAsGrant("team-a", ("0",)), "accounts"),
        (SetRunAsGrant("bad name", ("alice",)), "tenant"),
    ],
)
def test_an_invalid_grant_is_refused_naming_the_field_and_changes_nothing(
    command: SetRunAsGrant, field: str
) -> None:
    s = ClusterState.empty()
    with pytest.raises(InvalidRequest) as refused:
        s.apply(command)
    assert refused.value.field == field
    assert s.run_as_grants() == {}


def test_a_snapshot_carries_the_grants_and_restores_them() -> None:
    s = ClusterState.empty()
    s.apply(SetRunAsGrant("ops", ("daemon", "root"), allow_root=True))
    s.apply(SetRunAsGrant("team-a", ("alice",)))
    record = json.loads(json.dumps(encode_state(s)))
    restored = decode_state(record, FaultPolicy())
    assert restored.run_as_grants() == s.run_as_grants()
    assert restored.run_as_grants()["ops"].allow_root
    del record["access"]["grants"]  # a record from before replicated grants
    assert decode_state(record, FaultPolicy()).run_as_grants() == {}
