"""Membership changes on real `raft_kv` processes: join, remove, remove the leader, transfer.

Every wait is generous (the machine is shared) and nothing asserts on time.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.testing.ports import reserve_port
from tests.integration.conftest import wait_for
from tests.integration.test_raft_cluster import WAIT, KvCluster


class MemberCluster(KvCluster):
    """A `KvCluster` that can start servers with `--join` and change its membership."""

    def __init__(self, root: Path, n: int = 3) -> None:
        self.joined: set[int] = set()
        super().__init__(root, n)

    def start(self, i: int) -> None:
        if i not in self.joined:
            super().start(i)
            return
        log = (self.root / f"node{i}.log").open("ab")
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "gpu_platform.testing.raft_kv", "--id", str(i),
             "--peers", self.peers, "--data", str(self.root / f"n{i}"),
             "--http", str(self.http_ports[i]), "--tick", "0.05", "--join"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()

    def start_joining(self, i: int) -> str:
        """Start server `i` with `--join`; its Raft address."""
        self.ids.append(i)
        self.joined.add(i)
        self.raft_ports[i], self.http_ports[i] = reserve_port(), reserve_port()
        self.peers = ",".join(f"{j}=127.0.0.1:{p}" for j, p in self.raft_ports.items())
        self.start(i)
        return f"127.0.0.1:{self.raft_ports[i]}"

    def request(self, method: str, i: int, path: str, body: Any = None) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.http_ports[i]}{path}"
        try:
            r = self.client.request(method, url, json=body)
        except httpx.HTTPError as exc:
            return 0, {"error": str(exc)}
        return r.status_code, r.json()

    def change(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """A membership request at whoever leads, retried while leadership or a change moves."""
        deadline = time.monotonic() + WAIT
        while True:
            code, reply = self.request(method, self.wait_leader(), path, body)
            if code == 200:
                return dict(reply)
            assert code in (0, 409, 421, 503), reply
            assert time.monotonic() < deadline, reply
            time.sleep(0.1)

    def put_anywhere(self, key: str, value: str) -> None:
        assert wait_for(lambda: self.put(self.wait_leader(), key, value)[0] == 200, timeout=WAIT)

    def voters(self, i: int) -> list[int] | None:
        st = self.get(i, "/status")
        return None if st is None else list(st["voters"])


@pytest.fixture
def kv(tmp_path: Path) -> Iterator[MemberCluster]:
    c = MemberCluster(tmp_path)
    yield c
    c.close()


def test_a_joined_server_catches_up_counts_toward_commits_and_recovers_after_restart(
    kv: MemberCluster,
) -> None:
    for n in range(20):
        kv.put_anywhere(f"k{n}", f"v{n}")
    address = kv.start_joining(4)
    assert wait_for(lambda: kv.voters(4) == [], timeout=WAIT)  # started empty, waiting
    reply = kv.change("POST", "/members", {"id": 4, "address": address})
    assert reply["voters"] == [1, 2, 3, 4]
    data = {f"k{n}": f"v{n}" for n in range(20)}
    assert wait_for(lambda: kv.dump(4) == data, timeout=WAIT)
    assert wait_for(lambda: all(kv.voters(i) == [1, 2, 3, 4] for i in kv.ids), timeout=WAIT)
    # Four voters need three: with two originals down, commits need the new server.
    lead = kv.wait_leader()
    down = [i for i in (1, 2, 3) if i != lead][:1]
    for i in down:
        kv.kill9(i)
    kv.put_anywhere("with-4", "yes")
    assert wait_for(lambda: kv.dump(4).get("with-4") == "yes", timeout=WAIT)
    # The joined server restarts from its own disk (the --join flag changes nothing now).
    kv.kill9(4)
    kv.start(4)
    assert wait_for(lambda: kv.voters(4) == [1, 2, 3, 4], timeout=WAIT)
    assert wait_for(lambda: kv.dump(4).get("with-4") == "yes", timeout=WAIT)
    kv.put_anywhere("after-restart", "1")
    assert wait_for(lambda: kv.dump(4).get("after-restart") == "1", timeout=WAIT)


def test_a_removed_follower_stops_counting_and_a_removed_leader_is_replaced(
    kv: MemberCluster,
) -> None:
    kv.put_anywhere("a", "1")
    address = kv.start_joining(4)
    kv.change("POST", "/members", {"id": 4, "address": address})
    lead = kv.wait_leader()
    gone = next(i for i in kv.ids if i != lead)
    reply = kv.change("DELETE", f"/members/{gone}")
    rest = [i for i in kv.ids if i != gone]
    assert reply["voters"] == rest
    assert wait_for(lambda: all(kv.voters(i) == rest for i in rest), timeout=WAIT)
    # Three voters need two: with the removed node and one more down, commits go on.
    kv.kill9(gone)
    other = next(i for i in rest if i != kv.wait_leader())
    kv.kill9(other)
    kv.put_anywhere("b", "2")
    # Remove the leader itself; the two voters left must both be up for it to commit.
    kv.start(other)
    assert wait_for(lambda: kv.dump(other).get("b") == "2", timeout=WAIT)
    old = kv.wait_leader()
    reply = kv.change("DELETE", f"/members/{old}")
    left = [i for i in rest if i != old]
    assert reply["voters"] == left
    new = kv.wait_leader(exclude=old)
    assert new in left
    kv.put_anywhere("c", "3")
    assert wait_for(lambda: all(kv.dump(i).get("c") == "3" for i in left), timeout=WAIT)
    st = kv.get(old, "/status")
    assert st is not None and st["role"] != "leader" and st["voters"] == left


def test_leadership_moves_to_the_chosen_node_on_request(kv: MemberCluster) -> None:
    lead = kv.wait_leader()
    target = next(i for i in kv.ids if i != lead)
    assert wait_for(lambda: (kv.get(target, "/status") or {}).get("leader_id") == lead, WAIT)

    def moved() -> bool:
        if kv.leader() == target:
            return True
        kv.request("POST", target, "/transfer", {"to": target})  # forwarded to the leader
        return False

    assert wait_for(moved, timeout=WAIT)
    kv.put_anywhere("moved", "1")


def test_bad_membership_requests_are_refused_with_the_field_named(kv: MemberCluster) -> None:
    lead = kv.wait_leader()
    code, reply = kv.request("POST", lead, "/members", {"id": "x", "address": "h:1"})
    assert code == 422 and reply["error"].startswith("id:")
    code, reply = kv.request("POST", lead, "/members", {"id": 5, "address": "nope"})
    assert code == 422 and "address:" in reply["error"]
    code, reply = kv.request("POST", lead, "/transfer", {"to": 9})
    assert code == 422 and reply["error"].startswith("to:")
    follower = next(i for i in kv.ids if i != lead)
    code, reply = kv.request("DELETE", follower, f"/members/{lead}")
    assert code == 421
