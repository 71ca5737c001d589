"""Applying is separate from acknowledging (issue 21): three real `raft_kv` processes; the
leader's state-machine lock is held far longer than an election timeout while a write is in
flight. The leader's Raft loop never waits for that lock, so it keeps heartbeating and
replicating: no election happens and the write commits on the followers meanwhile.

Nothing asserts on time: the hold lasts several election timeouts (a wait, not an assert).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import wait_for
from tests.integration.test_raft_cluster import WAIT, KvCluster

# KvCluster ticks every 0.05 s with an election timeout of 10 ticks: 0.5-1 s. Held this long,
# a leader whose Raft loop waited for the lock would be deposed by its followers.
HOLD_S = 3.0


@pytest.fixture
def kv(tmp_path: Path) -> Iterator[KvCluster]:
    c = KvCluster(tmp_path)
    yield c
    c.close()


def _post(kv: KvCluster, i: int, path: str, doc: dict[str, Any]) -> int:
    r = kv.client.post(f"http://127.0.0.1:{kv.http_ports[i]}{path}", content=json.dumps(doc))
    return r.status_code


def test_a_leader_whose_state_lock_is_held_keeps_leading_and_its_followers_commit(
    kv: KvCluster,
) -> None:
    lead = kv.wait_leader()
    code, _ = kv.put(lead, "before", "x")
    assert code == 200
    status = {i: kv.get(i, "/status") for i in kv.ids}
    assert all(st is not None for st in status.values())
    term = {i: st["term"] for i, st in status.items() if st is not None}
    followers = [i for i in kv.ids if i != lead]

    assert _post(kv, lead, "/hold", {"held": True}) == 200
    answers: list[tuple[int, dict[str, Any]]] = []
    writer = threading.Thread(target=lambda: answers.append(kv.put(lead, "during", "y")))
    writer.start()
    try:
        leader_last = 0

        def write_appended() -> bool:
            nonlocal leader_last
            st = kv.get(lead, "/status")
            leader_last = 0 if st is None else st["last_index"]
            return leader_last > status[lead]["last_index"]  # type: ignore[index]

        assert wait_for(write_appended, timeout=WAIT)

        def committed_on_followers() -> bool:
            sts = [kv.get(i, "/status") for i in followers]
            return all(st is not None and st["commit"] >= leader_last for st in sts)

        # The write commits on the followers although the leader cannot apply it...
        assert wait_for(committed_on_followers, timeout=WAIT)
        assert not answers  # ...and is not acknowledged until it is applied
        time.sleep(HOLD_S)  # several election timeouts with the lock held
        during = {i: kv.get(i, "/status") for i in kv.ids}
    finally:
        _post(kv, lead, "/hold", {"held": False})
        writer.join(timeout=WAIT)

    for i, st in during.items():
        assert st is not None
        assert st["term"] == term[i], f"node {i} moved to term {st['term']} (an election)"
        assert st["leader_id"] == lead
    assert answers and answers[0][0] == 200
    after = kv.get(lead, "/status")
    assert after is not None and after["term"] == term[lead] and after["role"] == "leader"
