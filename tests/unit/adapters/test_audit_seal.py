"""The audit chain anchored by a key outside the data directory: cutting the tail together
with the head file, or re-hashing the whole chain, passes an unkeyed `audit verify` but not a
keyed one; the server refuses to start on such a log; a key added later seals an old log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_platform.adapters.audit_seal import load_key, verify_file
from gpu_platform.adapters.outbound.storage.audit_file import AuditChainBroken, JsonlAuditLog
from gpu_platform.domain.model.audit_chain import GENESIS, ChainBreak, chain_entry

_RESERVED = ("seq", "prev", "hash")


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "etc" / "audit.key"
    load_key(path, create=True)
    return path


def _log(path: Path, key: bytes | None, n: int = 5) -> None:
    log = JsonlAuditLog(path, key)
    for i in range(n):
        log.append({"action": "tokens.revoke", "who": "root", "i": i})
    log.close()


def _cut_tail_and_head(path: Path, keep: int) -> None:
    """The attack without the key: drop the last entries, rewrite the head to match."""
    lines = path.read_text().splitlines(keepends=True)[:keep]
    path.write_text("".join(lines))
    last = json.loads(lines[-1])
    path.with_name(path.name + ".head").write_text(f"{last['seq']} {last['hash']}\n")


def _rehash(path: Path, edit: dict[str, object]) -> None:
    """The attack without the key: edit entry 1, re-hash every entry after it, new head."""
    prev, out = GENESIS, []
    for raw in path.read_text().splitlines():
        entry = json.loads(raw)
        fields = {k: v for k, v in entry.items() if k not in _RESERVED}
        if entry["seq"] == 1:
            fields.update(edit)
        line, prev = chain_entry(entry["seq"], prev, fields)
        out.append(line + "\n")
    path.write_text("".join(out))
    path.with_name(path.name + ".head").write_text(f"{len(out)} {prev}\n")


@pytest.mark.parametrize(
    "attack",
    [lambda p: _cut_tail_and_head(p, 3), lambda p: _rehash(p, {"who": "nobody"})],
    ids=["cut tail and head", "re-hash the chain"],
)
def test_an_attack_that_passes_the_unkeyed_check_fails_with_the_key(
    tmp_path: Path, key_file: Path, attack: object
) -> None:
    key = load_key(key_file)
    path = tmp_path / "data" / "audit.jsonl"
    _log(path, key)
    assert verify_file(path, key) == 5
    attack(path)  # type: ignore[operator]
    assert isinstance(verify_file(path), int)  # the hash chain alone cannot tell
    broken = verify_file(path, key)
    assert isinstance(broken, ChainBreak) and "seal" in broken.reason
    with pytest.raises(AuditChainBroken, match="seal"):
        JsonlAuditLog(path, key)


def test_removing_the_sealed_head_file_does_not_verify(tmp_path: Path, key_file: Path) -> None:
    key = load_key(key_file)
    path = tmp_path / "audit.jsonl"
    _log(path, key)
    path.with_name("audit.jsonl.head").unlink()
    broken = verify_file(path, key)
    assert isinstance(broken, ChainBreak) and "no sealed head" in broken.reason


def test_a_log_written_with_another_key_does_not_verify(tmp_path: Path, key_file: Path) -> None:
    path = tmp_path / "audit.jsonl"
    _log(path, load_key(key_file))
    other = load_key(tmp_path / "other.key", create=True)
    assert isinstance(verify_file(path, other), ChainBreak)


def test_a_new_key_seals_an_existing_log_once_and_the_chain_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    _log(path, None, 3)
    key = load_key(tmp_path / "new.key", create=True)
    with pytest.raises(AuditChainBroken, match="not sealed"):
        JsonlAuditLog(path, key)  # an existing key never adopts an unsealed head
    log = JsonlAuditLog(path, key, adopt=True)
    log.append({"action": "after"})
    log.close()
    assert verify_file(path, key) == 4
    assert (tmp_path / "new.key").stat().st_mode & 0o777 == 0o600


def test_audit_verify_with_the_key_file_exits_8_naming_the_seal(
    tmp_path: Path, key_file: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    _log(path, load_key(key_file))
    _cut_tail_and_head(path, 2)
    assert isinstance(verify_file(path), int)  # what `audit verify` without the key says
    cmd = [sys.executable, "-m", "gpu_platform.main", "audit", "verify", "--file", str(path)]
    keyed = subprocess.run(
        [*cmd, "--key-file", str(key_file)], capture_output=True, text=True, check=False
    )
    assert keyed.returncode == 8 and "seal" in keyed.stderr + keyed.stdout
