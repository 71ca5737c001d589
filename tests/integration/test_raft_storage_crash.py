"""Kill -9 a process that writes the Raft log through `SqliteRaftStorage` at random instants:
every write it acknowledged is on disk afterwards, in order, with its term and data, and the
hard state always matches the log (entries and hard state are saved in one transaction). The
same with snapshots of several chunks staged by another thread while the log is written
(`snapshot_staging`): the snapshot found is always whole and the one its metadata names."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.domain.consensus.storage import NO_LIMIT

CHILD = r"""
import sys
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.domain.consensus import ConfState, Entry, EntryType, HardState

path, term = sys.argv[1], int(sys.argv[2])
s = SqliteRaftStorage(path)
conf = ConfState(voters=(1, 2, 3))
print("ready", flush=True)
i = s.last_index() + 1
while True:
    data = (f"{i}:{term}:" * 40).encode()
    s.save(HardState(term, 1, i), [Entry(term, i, EntryType.NORMAL, data)])
    print(i, term, flush=True)
    if i % 40 == 0:
        s.create_snapshot(i, conf, f"snap{i}".encode())
        s.compact(i - 5)
    i += 1
"""


STAGING_CHILD = r"""
import sys, threading
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.domain.consensus import ConfState, Entry, EntryType, HardState

path, term = sys.argv[1], int(sys.argv[2])
s = SqliteRaftStorage(path)
conf = ConfState(voters=(1, 2, 3))
print("ready", flush=True)
i = s.last_index() + 1
staged, stager = [], None
while True:
    data = (f"{i}:{term}:" * 40).encode()
    s.save(HardState(term, 1, i), [Entry(term, i, EntryType.NORMAL, data)])
    print(i, term, flush=True)
    if stager is None and i % 10 == 0:
        pieces = [f"snap{i}:".encode() * 100_000] * 2  # ~1.6 MB: 2 chunks
        stager = threading.Thread(target=lambda i=i, p=pieces: staged.append((i, s.stage_snapshot(p))))
        stager.start()
    elif stager is not None and not stager.is_alive():
        at, ahead = staged.pop()
        s.store_staged(at, conf, ahead)
        s.compact(at - 5)
        stager = None
    i += 1
"""


def snapshot_bytes(index: int, staged: bool) -> bytes:
    return f"snap{index}:".encode() * 200_000 if staged else f"snap{index}".encode()


def test_a_kill_9_at_random_instants_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    kill_at_random(tmp_path, CHILD, staged=False)


def test_a_kill_9_while_snapshots_are_staged_loses_nothing_and_keeps_a_whole_snapshot(
    tmp_path: Path,
) -> None:
    kill_at_random(tmp_path, STAGING_CHILD, staged=True)


MAX_ROUNDS = 30


def kill_at_random(tmp_path: Path, child: str, staged: bool) -> None:
    rng = random.Random(10)
    snapshots = set()
    db = tmp_path / "raft.db"
    acked: dict[int, int] = {}  # index -> term
    # Six rounds, then more (up to MAX_ROUNDS) until one stored a snapshot: on a loaded machine
    # a round's random window can end before the child got as far as storing one.
    for rnd in range(1, MAX_ROUNDS + 1):
        if rnd > 6 and snapshots:
            break
        proc = subprocess.Popen(
            [sys.executable, "-c", child, str(db), str(rnd)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.5))
        proc.kill()
        proc.wait(timeout=30)
        # An acknowledgement counts only once its whole line is out: the kill may cut the
        # last one short, so the fragment after the final newline is dropped.
        for line in proc.stdout.read().split("\n")[:-1]:
            index, term = map(int, line.split())
            acked[index] = term
        proc.stdout.close()

        s = SqliteRaftStorage(db)
        try:
            hs, _ = s.initial_state()
            last = s.last_index()
            top = max(acked)
            assert last >= top, f"round {rnd}: acknowledged index {top} lost (last {last})"
            assert last <= top + 1  # at most the one write that was not acknowledged yet
            assert hs.commit == last  # hard state and entries were saved together
            assert hs.term == s.term(last)
            log = s.entries(s.first_index(), last + 1, NO_LIMIT)
            assert [e.index for e in log] == list(range(s.first_index(), last + 1))
            for e in log:
                if e.index in acked:
                    assert e.term == acked[e.index]
                assert e.data == (f"{e.index}:{e.term}:" * 40).encode()
            snap = s.snapshot()
            if not snap.is_empty():
                assert snap.data == snapshot_bytes(snap.metadata.index, staged)
                snapshots.add(snap.metadata.index)
                assert s.first_index() <= snap.metadata.index + 1
        finally:
            s.close()
    assert len(acked) > 50  # the rounds really wrote something
    assert snapshots, f"no snapshot stored in {MAX_ROUNDS} rounds"
