"""`cpu_affinity`: the CPU lists it reads, the CPUs it picks, the pinning of a whole process
and its undoing in a child (each in a subprocess: the test process keeps its own mask)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gpu_platform.adapters.outbound.cpu_affinity import chosen_cpus, format_cpus, parse_cpus
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


def test_off_picks_nothing_auto_one_cpu_per_server_and_a_list_those_cpus() -> None:
    allowed = {2, 3, 5}
    assert chosen_cpus("off", 1, allowed) is None
    picked = [chosen_cpus("auto", server_id, allowed) for server_id in (0, 1, 2, 3, 4)]
    assert picked == [{2}, {2}, {3}, {5}, {2}]  # servers sharing a host spread out
    assert chosen_cpus("3,5", 1, allowed) == {3, 5}
    with pytest.raises(ValueError, match="CPU 7 is not one this process may use"):
        chosen_cpus("5,7", 1, allowed)


def test_the_setting_refuses_a_bad_list_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="cpu_affinity") as info:
        Settings(cpu_affinity="0,two")
    assert "'two' is not a CPU number or range" in str(info.value)
    assert Settings(cpu_affinity=" AUTO ").cpu_affinity == "auto"
    assert Settings().cpu_affinity == "off"  # the default leaves the process as it is


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
    one = [allowed[1 % len(allowed)]]  # server_id 2: the second CPU this process may use
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
