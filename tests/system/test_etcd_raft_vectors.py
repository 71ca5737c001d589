"""Replay etcd-raft's own datadriven vectors (quorum and confchange) against our core.

The files come from Debian's `golang-etcd-server-dev` (installed by `make deps`) and are read
at run time, never copied here. Each case's full expected output is compared, including
etcd's textual rendering of the commit computation (`describe`) and of the configuration.
Absent package: the tests skip locally and fail in CI (GPU_PLATFORM_REQUIRE_SYSTEM_TESTS=1).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_platform.domain.consensus.confchange import Changer, ConfChangeError
from gpu_platform.domain.consensus.quorum import (
    UNBOUNDED,
    JointConfig,
    describe,
    majority_committed_index,
)
from gpu_platform.domain.consensus.tracker import Progress, TrackerConfig, progress_map_str
from gpu_platform.domain.consensus.types import ConfChangeSingle, ConfChangeType
from gpu_platform.testing.system import require

pytestmark = pytest.mark.system

PACKAGE = "golang-etcd-server-dev"
CANDIDATE_ROOTS = [
    os.environ.get("GPU_PLATFORM_ETCD_RAFT_DIR", ""),
    "/usr/share/gocode/src/go.etcd.io/etcd/raft",
    "/usr/share/gocode/src/go.etcd.io/raft/v3",
    "/usr/share/gocode/src/go.etcd.io/etcd/raft/v3",
]


def raft_root() -> Path | None:
    for root in CANDIDATE_ROOTS:
        if root and (Path(root) / "quorum" / "testdata").is_dir():
            return Path(root)
    return None


# ----------------------------------------------------------------------------- datadriven
@dataclass(frozen=True)
class Case:
    path: Path
    line: int
    cmd: str
    args: dict[str, list[str]]
    input: str
    expected: str

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"


ARG = re.compile(r"(\w[\w-]*)(?:=(\([^)]*\)|\S+))?")


def parse_datadriven(path: Path) -> list[Case]:
    """Parse cockroachdb/datadriven files: `cmd args`, input, `----`, output, blank line."""
    lines = path.read_text().split("\n")
    cases: list[Case] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        start = i + 1
        head = line.split(None, 1)
        cmd, rest = head[0], head[1] if len(head) > 1 else ""
        args: dict[str, list[str]] = {}
        for m in ARG.finditer(rest):
            key, val = m.group(1), m.group(2) or ""
            vals = [v.strip() for v in val.strip("()").split(",")] if val else []
            args[key] = [v for v in vals if v != ""]
        i += 1
        input_lines = []
        while lines[i] != "----":
            input_lines.append(lines[i])
            i += 1
        i += 1
        out: list[str] = []
        if i < len(lines) and lines[i] == "----":  # double separator: output may hold blanks
            i += 1
            while not (lines[i] == "----" and lines[i + 1] == "----"):
                out.append(lines[i])
                i += 1
            i += 2
        else:
            while i < len(lines) and lines[i].strip() != "":
                out.append(lines[i])
                i += 1
        expected = "\n".join(out) + "\n" if out else ""
        cases.append(Case(path, start, cmd, args, "\n".join(input_lines), expected))
    return cases


def vector_files(kind: str) -> list[Path]:
    root = raft_root()
    if root is None:
        return []
    return sorted((root / kind / "testdata").glob("*.txt"))


def quorum_cases() -> list[Case]:
    return [c for p in vector_files("quorum") for c in parse_datadriven(p)]


# ----------------------------------------------------------------------------- quorum
def _fmt_index(i: int) -> str:
    return "∞" if i == UNBOUNDED else str(i)


def brute_force_committed(voters: list[int], acked: dict[int, int]) -> int:
    """Oracle: the largest index that at least a majority of voters has acknowledged."""
    if not voters:
        return UNBOUNDED
    candidates = {0, *(acked.get(v, 0) for v in voters)}
    q = len(voters) // 2 + 1
    return max(c for c in candidates if sum(acked.get(v, 0) >= c for v in voters) >= q)


def run_quorum_case(case: Case) -> str:
    ids = [int(v) for v in case.args.get("cfg", [])]
    joint = "cfgj" in case.args
    idsj = [int(v) for v in case.args.get("cfgj", []) if v != "zero"]
    raw = case.args.get("idx" if case.cmd == "committed" else "votes", [])
    order: list[int] = []
    for vid in ids + idsj:
        if vid not in order:
            order.append(vid)
    if len(order) != len(raw):
        return f"error: mismatched input (explicit or _) for voters {order}: {raw}\n"
    values = {vid: v for vid, v in zip(order, raw, strict=True) if v != "_"}
    cfg = JointConfig(frozenset(ids), frozenset(idsj))
    out = ""
    if case.cmd == "committed":
        acked = {vid: int(v) for vid, v in values.items()}
        if not joint:
            idx = majority_committed_index(ids, acked)
            out += describe(ids, acked)
            if (alt := brute_force_committed(ids, acked)) != idx:
                out += f"{_fmt_index(alt)} <-- via alternative computation\n"
            if (alt := JointConfig(frozenset(ids)).committed_index(acked)) != idx:
                out += f"{_fmt_index(alt)} <-- via zero-joint quorum\n"
            if (alt := JointConfig(frozenset(ids), frozenset(ids)).committed_index(acked)) != idx:
                out += f"{_fmt_index(alt)} <-- via self-joint quorum\n"
            for vid in ids:
                # As etcd's harness: lowering an index already below the result (to one less,
                # or to zero) must not change the result.
                own = acked.get(vid, 0)
                if idx > own > 0:
                    for lowered, label in ((own - 1, own), (0, 0)):
                        alt = majority_committed_index(ids, {**acked, vid: lowered})
                        if alt != idx:
                            out += f"{_fmt_index(alt)} <-- overlaying {vid}->{label}"
        else:
            idx = cfg.committed_index(acked)
            out += describe(cfg.ids(), acked)
            swapped = JointConfig(cfg.outgoing, cfg.incoming).committed_index(acked)
            if swapped != idx:
                out += f"{_fmt_index(swapped)} <-- via symmetry\n"
        return out + _fmt_index(idx) + "\n"
    votes = {vid: v == "y" for vid, v in values.items()}
    result = cfg.vote_result(votes)
    if joint and (alt := JointConfig(cfg.outgoing, cfg.incoming).vote_result(votes)) != result:
        out += f"{alt.value} <-- via symmetry\n"
    return out + result.value + "\n"


_QUORUM = quorum_cases()


@pytest.mark.parametrize("case", _QUORUM or [None], ids=[c.id for c in _QUORUM] or ["absent"])
def test_quorum_vector_matches_etcd_raft(case: Case | None) -> None:
    require(
        case is not None, f"etcd-raft quorum vectors not found: install Debian package {PACKAGE}"
    )
    assert case is not None
    assert run_quorum_case(case) == case.expected, case.id


def test_quorum_vectors_cover_all_four_etcd_files() -> None:
    # Everything read now, at run time: vectors installed after collection still count.
    files = {p.name for p in vector_files("quorum")}
    require(bool(files), f"etcd-raft quorum vectors not found: install Debian package {PACKAGE}")
    assert files >= {
        "majority_commit.txt",
        "majority_vote.txt",
        "joint_commit.txt",
        "joint_vote.txt",
    }
    assert len(quorum_cases()) > 100


def test_the_coverage_check_reads_the_vectors_when_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Vectors that appear between collection and run time are seen (issue 19, item 6)."""
    import sys

    module = sys.modules[__name__]
    names = ("majority_commit.txt", "majority_vote.txt", "joint_commit.txt", "joint_vote.txt")
    monkeypatch.setattr(module, "_QUORUM", [])  # as collected on a host without the package
    monkeypatch.setattr(module, "vector_files", lambda kind: [Path(n) for n in names])
    case = Case(Path("x.txt"), 1, "cmd", {}, "", "")
    monkeypatch.setattr(module, "quorum_cases", lambda: [case] * 101)
    test_quorum_vectors_cover_all_four_etcd_files()


# ----------------------------------------------------------------------------- confchange
TOKEN_TYPES = {
    "v": ConfChangeType.ADD_NODE,
    "l": ConfChangeType.ADD_LEARNER_NODE,
    "r": ConfChangeType.REMOVE_NODE,
    "u": ConfChangeType.UPDATE_NODE,
}


def run_confchange_file(path: Path) -> list[tuple[Case, str]]:
    """Run a file's commands against one evolving configuration, as etcd's harness does."""
    config, progress = TrackerConfig(), dict[int, Progress]()
    results = []
    for last_index, case in enumerate(parse_datadriven(path)):
        toks = case.input.strip().split()
        changes = [ConfChangeSingle(TOKEN_TYPES[t[0]], int(t[1:])) for t in toks]
        changer = Changer(config, progress, last_index, max_inflight=10)
        try:
            if case.cmd == "simple":
                config, progress = changer.simple(changes)
            elif case.cmd == "enter-joint":
                auto_leave = case.args.get("autoleave", ["false"])[0] == "true"
                config, progress = changer.enter_joint(auto_leave, changes)
            elif case.cmd == "leave-joint":
                if changes:
                    raise ConfChangeError("this command takes no input")
                config, progress = changer.leave_joint()
            else:
                raise AssertionError(f"unknown command {case.cmd}")
        except ConfChangeError as err:
            results.append((case, f"{err}\n"))
            continue
        results.append((case, f"{config}\n{progress_map_str(progress)}"))
    return results


_CONFCHANGE_FILES = vector_files("confchange")


@pytest.mark.parametrize(
    "path", _CONFCHANGE_FILES or [None], ids=[p.name for p in _CONFCHANGE_FILES] or ["absent"]
)
def test_confchange_vector_file_matches_etcd_raft(path: Path | None) -> None:
    require(path is not None, f"etcd-raft confchange vectors not found: install {PACKAGE}")
    assert path is not None
    for case, got in run_confchange_file(path):
        assert got == case.expected, f"{case.id}: {case.cmd} {case.input!r}"
