"""`cpu_affinity`: the CPU lists it reads, the CPUs it picks, the pinning of a whole process
and its undoing in a child (each in a subprocess: the test process keeps its own mask)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gpu_platform.adapters.outbound import cpu_affinity
from gpu_platform.adapters.outbound.cpu_affinity import (
    UNPINNED_ENV,
    chosen_cpus,
    cpu_capacities,
    format_cpus,
    parse_cpus,
    role_cpus,
    unpinned,
)
from gpu_platform.infrastructure.config import Settings


@given(st.sets(st.integers(min_value=0, max_value=300), min_size=1))
def test_a_cpu_list_reads_back_as_the_cpus_it_was_made_of(cpus: set[int]) -> None:
    assert parse_cpus(format_cpus(cpus)) == cpus


def test_ranges_are_merged_and_read() -> None:
    assert format_cpus({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7"
    assert parse_cpus(" 0-2 , 4,6-7") == {0, 1, 2, 4, 6, 7}


@pytest.mark.parametrize(("spec", "part"), [("x", "'x'"), ("1-", "'1-'"), ("3-1", "'3-1'")])
def test_a_bad_cpu_list_names_the_part(spec: str, part: str) -> None:
    with pytest.raises(ValueError, match=part):
        parse_cpus(spec)


def test_off_picks_nothing_auto_one_cpu_per_server_and_a_list_those_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu_affinity, "cpu_capacities", lambda cpus: {})  # cores alike
    allowed = {2, 3, 5}
    assert chosen_cpus("off", 1, allowed) is None
    picked = [chosen_cpus("auto", server_id, allowed) for server_id in (0, 1, 2, 3, 4)]
    # the embedded server (0) leads: the last CPU; replicated servers start as followers on
    # the others, spread out by server_id
    assert picked == [{5}, {2}, {3}, {2}, {3}]
    assert chosen_cpus("auto", 2, {4}) == {4}  # one CPU: everyone's
    assert chosen_cpus("3,5", 1, allowed) == {3, 5}
    with pytest.raises(ValueError, match="CPU 7 is not one this process may use"):
        chosen_cpus("5,7", 1, allowed)


def test_the_setting_refuses_a_bad_list_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="cpu_affinity") as info:
        Settings(cpu_affinity="0,two")
    assert "'two' is not a CPU number or range" in str(info.value)
    assert Settings(cpu_affinity=" AUTO ").cpu_affinity == "auto"
    assert Settings().cpu_affinity == "auto"  # the default: the server's threads on one CPU


_PIN = """
import json, os, sys, threading
from gpu_platform.adapters.outbound.cpu_affinity import pin_process
early = threading.Thread(target=threading.Event().wait, daemon=True)
early.start()  # a thread that was running before the pin
pin_process(sys.argv[1], int(sys.argv[2]))
late = []
t = threading.Thread(target=lambda: late.append(sorted(os.sched_getaffinity(0))))
t.start(); t.join()
threads = {int(tid): sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
child = __import__("subprocess").run(
    [sys.executable, "-c",
     "import os; from gpu_platform.adapters.outbound.cpu_affinity import unpin_self;"
     "before = sorted(os.sched_getaffinity(0)); unpin_self(); print(before, sorted(os.sched_getaffinity(0)))"],
    capture_output=True, text=True, check=True).stdout
print(json.dumps({"threads": list(threads.values()), "late": late[0], "child": child,
                  "env": os.environ.get("GPU_PLATFORM_CPUS_UNPINNED")}))
"""


def _pinned(spec: str, server_id: int) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _PIN, spec, str(server_id)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_auto_pins_every_thread_and_a_child_gets_the_whole_mask_back() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    followers = allowed[:-1] or allowed  # server_id 2 starts as a follower
    one = [followers[1 % len(followers)]]
    got = _pinned("auto", 2)
    assert got["threads"] == [one] * len(got["threads"])  # type: ignore[arg-type]
    assert got["late"] == one  # a thread started later inherits the mask
    assert got["env"] == ",".join(map(str, allowed))
    assert got["child"] == f"{one} {allowed}\n"  # pinned at birth, unpinned by unpin_self


def test_off_leaves_the_process_and_its_children_as_they_were() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    got = _pinned("off", 1)
    assert got["late"] == allowed
    assert got["env"] is None
    assert got["child"] == f"{allowed} {allowed}\n"


_DAEMON = """
import os, subprocess, sys
from pathlib import Path
from gpu_platform.adapters.outbound.cpu_affinity import pin_process, unpinned
from gpu_platform.adapters.outbound.mps import MpsDaemonController
from gpu_platform.adapters.outbound.mps.control import PID_FILE
from gpu_platform.testing.fake_mps_control import write_fake_mps_control
pin_process("auto", 1)
tmp = Path(sys.argv[1])
direct = subprocess.run(["grep", "Cpus_allowed_list", "/proc/self/status"],
                        capture_output=True, text=True, check=True).stdout.split()[-1]
wrapped = subprocess.run(unpinned(["grep", "Cpus_allowed_list", "/proc/self/status"]),
                         capture_output=True, text=True, check=True).stdout.split()[-1]
ctl = MpsDaemonController(tmp / "pipe", tmp / "log", executable=str(write_fake_mps_control(tmp)))
ctl.start_mps(0)
pid = (ctl.pipe_dir(0) / PID_FILE).read_text().strip()
daemon = [l for l in Path(f"/proc/{pid}/status").read_text().splitlines()
          if l.startswith("Cpus_allowed_list")][0].split()[-1]
ctl.stop_mps(0)
print(direct, wrapped, daemon)
"""


def test_a_program_the_pinned_server_runs_through_unpinned_gets_the_whole_mask(
    tmp_path: Path,
) -> None:
    """A plain child of the pinned server inherits its one CPU; one run through `unpinned`
    (the MPS control daemon) gets every CPU the server started with."""
    allowed = os.sched_getaffinity(0)
    out = subprocess.run(
        [sys.executable, "-c", _DAEMON, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    direct, wrapped, daemon = (parse_cpus(x) for x in out)
    assert direct == role_cpus(1, allowed, leading=False)  # server 1 starts as a follower
    assert wrapped == allowed and daemon == allowed


def test_unpinned_leaves_argv_alone_when_not_pinned_or_the_program_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(UNPINNED_ENV, raising=False)
    assert unpinned(["true"]) == ["true"]
    monkeypatch.setenv(UNPINNED_ENV, "0")
    assert unpinned(["no-such-program-here"]) == ["no-such-program-here"]
    assert unpinned(["true"])[-2:] == ["0", "true"]


@given(st.sets(st.integers(0, 63), min_size=1, max_size=16), st.integers(0, 9))
def test_the_leader_has_the_last_cpu_and_a_follower_another_when_there_is_one(
    allowed: set[int], server_id: int
) -> None:
    leader = role_cpus(server_id, allowed, True, capacity={})
    follower = role_cpus(server_id, allowed, False, capacity={})
    assert leader == {max(allowed)}
    assert len(follower) == 1 and follower <= allowed
    assert (follower != leader) == (len(allowed) > 1)


@given(st.dictionaries(st.integers(0, 31), st.sampled_from([512, 1024]), min_size=1, max_size=16))
def test_where_cores_differ_the_leader_and_then_the_followers_take_the_fastest(
    capacity: dict[int, int],
) -> None:
    allowed = set(capacity)
    fastest = max(capacity.values())
    leader = role_cpus(1, allowed, True, capacity=capacity)
    assert leader == {max(cpu for cpu in allowed if capacity[cpu] == fastest)}
    rest = allowed - leader
    for server_id in (1, 2, 3):
        (follower,) = role_cpus(server_id, allowed, False, capacity=capacity)
        assert follower in (rest or leader)
    if rest:  # the first follower gets the fastest core the leader left
        (first,) = role_cpus(1, allowed, False, capacity=capacity)
        assert capacity[first] == max(capacity[cpu] for cpu in rest)


def _sysfs(root: Path, name: str, values: dict[int, str]) -> None:
    for cpu, value in values.items():
        (root / f"cpu{cpu}" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / f"cpu{cpu}" / name).write_text(value + "\n")


def test_cpu_capacities_read_the_kernels_figures_and_are_empty_where_cores_are_alike(
    tmp_path: Path,
) -> None:
    hybrid, alike, freq, unread = (tmp_path / n for n in ("hybrid", "alike", "freq", "unread"))
    _sysfs(hybrid, "cpu_capacity", {0: "1024", 1: "1024", 2: "386", 3: "386"})
    _sysfs(alike, "cpu_capacity", {0: "1024", 1: "1024"})
    _sysfs(freq, "cpufreq/cpuinfo_max_freq", {0: "5400000", 1: "4200000"})  # no cpu_capacity
    _sysfs(unread, "cpu_capacity", {0: "1024"})  # CPU 1 has none
    assert cpu_capacities(frozenset({0, 1, 2, 3}), str(hybrid)) == {
        0: 1024,
        1: 1024,
        2: 386,
        3: 386,
    }
    assert cpu_capacities(frozenset({0, 1}), str(alike)) == {}
    assert cpu_capacities(frozenset({0, 1}), str(freq)) == {0: 5400000, 1: 4200000}
    assert cpu_capacities(frozenset({0, 1}), str(unread)) == {}
    # a hybrid host: the leader on the last P-core, followers on the other P-core first
    ranks = cpu_capacities(frozenset({0, 1, 2, 3}), str(hybrid))
    assert role_cpus(0, {0, 1, 2, 3}, True, ranks) == {1}
    assert [role_cpus(i, {0, 1, 2, 3}, False, ranks) for i in (1, 2, 3)] == [{0}, {2}, {3}]


_FOLLOW = """
import json, os, sys, threading, time
from gpu_platform.adapters.outbound.cpu_affinity import FollowRole, pin_process
pin_process("auto", 2)
leading = threading.Event()
role = FollowRole(2, leading.is_set, every_s=0.01)
role.start()
def cpus():
    return sorted({c for t in os.listdir("/proc/self/task") for c in os.sched_getaffinity(int(t))})
def settle(moves):
    deadline = time.monotonic() + 10
    while role.moves < moves and time.monotonic() < deadline:
        time.sleep(0.01)
seen = [cpus()]
leading.set(); settle(1); seen.append(cpus())
late = []
t = threading.Thread(target=lambda: late.append(sorted(os.sched_getaffinity(0)))); t.start(); t.join()
leading.clear(); settle(2); seen.append(cpus())
role.stop()
print(json.dumps({"seen": seen, "late": late[0], "moves": role.moves}))
"""


def run_with_two_cpus(script: str, why: str) -> dict[str, Any]:
    """What `script` prints as JSON, run in a child (it pins itself); skipped, saying `why`
    two CPUs are needed, when this process has one."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip(f"needs two CPUs {why}")
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    got: dict[str, Any] = json.loads(out.stdout)
    return got


def test_a_server_that_takes_the_lead_moves_every_thread_to_the_leaders_cpu_and_back() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    got = run_with_two_cpus(_FOLLOW, "to tell the leader's from a follower's")
    follower = [allowed[:-1][1 % len(allowed[:-1])]]
    assert got["seen"] == [follower, [allowed[-1]], follower]  # every thread, each time
    assert got["late"] == [allowed[-1]]  # a thread started while leading inherits it
    assert got["moves"] == 2
