"""`cpu_affinity = auto` moves a pinned server off a crowded CPU: the figures, the rule, and
FollowRole acting on it (cpu_crowding.py)."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.cpu_affinity import FollowRole
from gpu_platform.adapters.outbound.cpu_crowding import (
    Sample,
    crowded_move,
    parse_own_ticks,
    parse_proc_stat,
    read_sample,
)
from tests.unit.adapters.test_cpu_affinity import run_with_two_cpus

_STAT = """cpu  300 0 100 900 50 0 10 0 0 0
cpu0 100 0 50 500 20 0 5 0 0 0
cpu1 200 0 50 400 30 0 5 0 0 0
intr 12345 0 0
ctxt 999
"""


def test_proc_stat_gives_each_cpus_busy_and_total_ticks() -> None:
    busy, total = parse_proc_stat(_STAT)
    assert busy == {0: 155, 1: 255}  # user + system + softirq; idle and iowait are not busy
    assert total == {0: 675, 1: 685}


def test_a_process_stat_line_gives_user_plus_system_even_with_odd_names() -> None:
    line = "123 (a) b (c)) S 1 123 123 0 -1 4194560 10 0 0 0 70 30 0 0 20 0 9 0 5 6 7"
    assert parse_own_ticks(line) == 100


def test_the_real_proc_files_read() -> None:
    sample = read_sample()
    assert set(sample.busy) == set(sample.total) >= os.sched_getaffinity(0)
    assert all(0 <= sample.busy[c] <= sample.total[c] for c in sample.total)
    assert sample.own >= 0


def _window(idle: dict[int, float], own: float, span: int = 100) -> tuple[Sample, Sample]:
    """Two samples `span` ticks apart: each CPU idle for its share, this process `own`."""
    before = Sample({c: 0 for c in idle}, {c: 0 for c in idle}, 0)
    busy = {c: round(span * (1 - i)) for c, i in idle.items()}
    return before, Sample(busy, {c: span for c in idle}, round(span * own))


def test_a_cpu_crowded_by_others_is_left_for_the_idlest_with_room() -> None:
    before, after = _window({0: 0.6, 1: 0.0, 2: 0.9, 3: 0.3}, own=0.3)
    assert crowded_move(before, after, 1, {0, 1, 2, 3}) == 2
    assert crowded_move(before, after, 1, {0, 1, 3}) == 0  # among the candidates only


def test_the_server_stays_when_its_cpu_is_busy_with_itself_or_no_cpu_has_room() -> None:
    before, after = _window({0: 0.9, 1: 0.0}, own=0.8)  # others took 0.2 of CPU 1
    assert crowded_move(before, after, 1, {0, 1}) is None
    before, after = _window({0: 0.2, 1: 0.0}, own=0.1)  # crowded, but CPU 0 is busy too
    assert crowded_move(before, after, 1, {0, 1}) is None
    before, after = _window({0: 1.0, 1: 0.0}, own=0.1)
    assert crowded_move(before, after, 1, {1}) is None  # nowhere else to go


def test_a_cpu_missing_from_a_sample_is_not_a_place_to_go() -> None:
    before, after = _window({0: 1.0, 1: 0.0}, own=0.1)
    del before.total[0], before.busy[0]  # it came online between the samples
    assert crowded_move(before, after, 1, {0, 1}) is None


@given(
    st.dictionaries(st.integers(0, 7), st.floats(0, 1), min_size=1, max_size=8),
    st.floats(0, 1),
    st.data(),
)
def test_a_move_goes_only_to_a_candidate_with_room_away_from_a_crowded_cpu(
    idle: dict[int, float], own: float, data: st.DataObject
) -> None:
    mine = data.draw(st.sampled_from(sorted(idle)))
    own = min(own, 1 - idle[mine])  # the server ran only within its CPU's busy time
    candidates = data.draw(st.sets(st.sampled_from(sorted(idle))))
    before, after = _window(idle, own, span=1000)
    target = crowded_move(before, after, mine, candidates)
    if target is None:
        return
    assert target in candidates and target != mine
    others = 1 - idle[mine] - own
    assert others >= 0.5 - 0.002  # ticks are whole numbers
    assert idle[target] >= idle[mine] + 0.25 - 0.002
    assert all(idle[target] >= idle[c] - 0.002 for c in candidates - {mine})


def test_a_follower_never_moves_to_the_leaders_cpu() -> None:
    role = FollowRole(1, lambda: False, allowed={0, 1})
    before, after = _window({0: 0.0, 1: 1.0}, own=0.1)
    assert role._escape(before, after, 0, leading=False) is None
    assert role._escape(before, after, 0, leading=True) == 1


_ESCAPE = """
import json, os, threading, time
from gpu_platform.adapters.outbound.cpu_affinity import FollowRole, pin_process
from gpu_platform.adapters.outbound.cpu_crowding import Sample
allowed = sorted(os.sched_getaffinity(0))
first, last = allowed[0], allowed[-1]
pin_process("auto", 0)  # the embedded server: the last CPU
busy, total, own = {first: 0, last: 0}, {first: 0, last: 0}, [0]
def sample():  # the server's CPU busy, 10 % of it the server's; the other idle
    mine = min(os.sched_getaffinity(0))
    busy[mine] += 100
    for cpu in total:
        total[cpu] += 100
    own[0] += 10
    return Sample(dict(busy), dict(total), own[0])
role = FollowRole(0, lambda: True, every_s=0.005, crowd_every_s=0.01, settle_s=30, sample=sample)
role.start()
deadline = time.monotonic() + 10
while role.escapes < 1 and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.3)  # the new CPU crowded too, but the server settles first: no second move
cpus = sorted({c for t in os.listdir("/proc/self/task") for c in os.sched_getaffinity(int(t))})
role.stop()
print(json.dumps({"cpus": cpus, "escapes": role.escapes, "moves": role.moves}))
"""


def test_a_crowded_server_moves_every_thread_once_then_settles() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    got = run_with_two_cpus(_ESCAPE, "to move between")
    assert got == {"cpus": [allowed[0]], "escapes": 1, "moves": 1}
