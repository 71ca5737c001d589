"""Shared fixtures, and the session-end check that tests leave no processes or cgroups behind.

Every process a test starts inherits `GPU_PLATFORM_TEST_SESSION` (set here, before any test
runs), so leftovers are found by that marker in /proc/PID/environ even after they were
reparented to init (daemons, `start_new_session=True`, orphaned grandchildren). Job cgroups
still there at the end count as leftovers too when they belong to a data directory under this
session's temporary base (the instance is a hash of the data directory), or were made
straight under `gpu-platform/` during the session, or are empty job groups of any instance
made during the session (a data directory elsewhere, such as a short path under /tmp); so does an instance's own group (empty, left
by a server that was killed), named with its data directory, which names the test.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import settings

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.node import Inventory

# CLI tables size themselves to COLUMNS; a runner's own terminal (pytest-xdist workers set one)
# must not change what the CLI tests read. Tests that need a width set it themselves.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

# No per-example deadline: on a loaded 2-core machine (CI, two xdist workers) a first example
# can take 100x its usual time, and a timing failure says nothing about the property.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

SESSION_MARKER = "GPU_PLATFORM_TEST_SESSION"
CGROUP_ROOT = Path("/sys/fs/cgroup")
SETTLE_S = 15.0  # processes told to stop during teardown get this long to go
#: Test jobs run this interpreter, which may lie where the default job account cannot reach
#: (a pyenv under /root), and many tests follow a job by the pid it prints: servers and agents
#: that tests start keep jobs as root in the host's PID namespace unless the test asks for the
#: product's defaults (tests/integration/test_job_attacks.py does).
TEST_JOB_ENV = {"GPU_PLATFORM_JOB_USER": "root", "GPU_PLATFORM_JOB_PID_NAMESPACE": "false"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with a `slow` test run first when the suite runs in one process
    (PYTEST_WORKERS=0); under pytest-xdist its own order (most tests per file first) wins."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: order kept otherwise


@pytest.fixture
def inventory() -> Inventory:
    """The embedded default: one 8-GPU node, GPUs 0-3 on NUMA 0 and 4-7 on NUMA 1."""
    return Inventory((default_node(),), source="sim", simulated=True)


def marked_processes(marker: str, *, exclude: int) -> dict[int, str]:
    """Live (not zombie) processes whose environment holds `SESSION_MARKER=marker`."""
    needle = f"{SESSION_MARKER}={marker}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == exclude:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        found[int(entry.name)] = argv.strip()
    return found


def instance_of(data_dir: Path) -> str:
    """The cgroup instance a server or agent with this data directory uses (container.py)."""
    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]


def job_cgroups(instances: set[str]) -> set[Path]:
    """Job cgroups of these instances (`gpu-platform/<instance>/<job>`), in every hierarchy,
    plus job cgroups made straight under `gpu-platform/` (adapters built with the default
    prefix, as the cgroup system tests do)."""
    found: set[Path] = set()
    for top in [*CGROUP_ROOT.glob("*/gpu-platform"), CGROUP_ROOT / "gpu-platform"]:
        if not top.is_dir():
            continue
        for child in top.iterdir():
            if not child.is_dir():
                continue
            if child.name.startswith("j-"):
                found.add(child)
            elif child.name in instances:
                found.update(p for p in child.iterdir() if p.is_dir())
    return found


def empty_instance_job_groups() -> set[Path]:
    """Job cgroups with no process in them under any instance group
    (`gpu-platform/<instance>/<job>`): a test whose data directory lies outside the session's
    base (a short Unix socket path under /tmp) has an instance this session cannot name. Only
    empty ones: the groups of jobs other pytest-xdist workers still run are not leftovers,
    and the empty group of a job that just ended is released within moments."""
    return {
        job
        for top in [*CGROUP_ROOT.glob("*/gpu-platform"), CGROUP_ROOT / "gpu-platform"]
        if top.is_dir()
        for group in _subdirs(top)
        if not group.name.startswith("j-")
        for job in _subdirs(group)
        if _no_tasks(job)
    }


def _no_tasks(group: Path) -> bool:
    try:
        return not (group / "tasks").read_text().strip()
    except OSError:
        return False  # gone meanwhile, or a hierarchy without a task list


def session_instances(base: Path, depth: int = 4) -> dict[str, Path]:
    """Cgroup instances of every directory this session made under its temporary base, each
    with its directory."""
    found, level = {}, [base]
    for _ in range(depth):
        level = [p for d in level for p in _subdirs(d)]
        found.update((instance_of(p), p) for p in level)
    return found


def instance_groups(instances: Mapping[str, Path]) -> dict[Path, Path]:
    """Instance groups (`gpu-platform/<instance>`, every hierarchy) of these instances that
    still exist, each with its data directory."""
    return {
        group: instances[group.name]
        for top in [*CGROUP_ROOT.glob("*/gpu-platform"), CGROUP_ROOT / "gpu-platform"]
        if top.is_dir()
        for group in top.iterdir()
        if group.is_dir() and group.name in instances
    }


def _subdirs(d: Path) -> list[Path]:
    try:
        return [p for p in d.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


@pytest.fixture(scope="session", autouse=True)
def no_leftovers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the session if a test left a process it started, or a job cgroup, behind."""
    marker = uuid.uuid4().hex
    os.environ[SESSION_MARKER] = marker
    for key, value in TEST_JOB_ENV.items():
        os.environ.setdefault(key, value)
    base = tmp_path_factory.getbasetemp()
    before = job_cgroups(set()) | empty_instance_job_groups()
    yield
    me = os.getpid()
    deadline = time.monotonic() + SETTLE_S
    while (left := marked_processes(marker, exclude=me)) and time.monotonic() < deadline:
        time.sleep(0.2)
    instances = session_instances(base)

    def new_job_groups() -> set[Path]:
        return (job_cgroups(set(instances)) | empty_instance_job_groups()) - before

    while (cgroups := new_job_groups()) and time.monotonic() < deadline:
        time.sleep(0.2)
    if cgroups:  # what stayed all along: another worker's groups come and go meanwhile
        settled = new_job_groups()
        cgroups = {g for g in cgroups if g in settled}
    for pid in left:  # clean up, so one leak does not poison the next run
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    problems = [f"process {pid} still running: {argv}" for pid, argv in sorted(left.items())]
    problems += [f"cgroup left behind: {p}" for p in sorted(cgroups)]
    if not cgroups:  # an instance's group alone: empty, so removed here (next runs stay clean)
        for group, data_dir in sorted(instance_groups(instances).items()):
            problems.append(f"cgroup left behind: {group} (data directory {data_dir})")
            with contextlib.suppress(OSError):
                group.rmdir()
    assert not problems, "tests left these behind:\n" + "\n".join(problems)
