"""The audit file survives a kill -9 at either point of an append, and still refuses tampering."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.storage.audit_file import (
    AuditChainBroken,
    JsonlAuditLog,
    read_head,
    verify_file,
)


def _log(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "audit.jsonl"
    log = JsonlAuditLog(path)
    for i in range(n):
        log.append({"action": "test", "i": i})
    log.close()
    return path


def test_a_torn_last_line_is_cut_off(tmp_path: Path) -> None:
    path = _log(tmp_path, 3)
    with path.open("a") as f:
        f.write('{"seq": 4, "prev": "abc", "ac')  # the crash came mid-write
    log = JsonlAuditLog(path)
    log.append({"action": "after"})
    log.close()
    assert verify_file(path) == 4


def test_an_entry_written_before_the_head_moved_is_rolled_forward(tmp_path: Path) -> None:
    path = _log(tmp_path, 3)
    head_before = path.with_name("audit.jsonl.head").read_text()
    log = JsonlAuditLog(path)
    log.append({"action": "fourth"})
    log.close()
    path.with_name("audit.jsonl.head").write_text(head_before)  # the head replace never ran
    log = JsonlAuditLog(path)
    log.close()
    assert read_head(path) is not None and read_head(path)[0] == 4  # type: ignore[index]
    assert verify_file(path) == 4


def test_a_removed_entry_is_still_refused(tmp_path: Path) -> None:
    path = _log(tmp_path, 3)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))
    with pytest.raises(AuditChainBroken):
        JsonlAuditLog(path)


def test_an_edited_entry_is_still_refused(tmp_path: Path) -> None:
    path = _log(tmp_path, 3)
    text = path.read_text().replace('"i":1', '"i":7')
    path.write_text(text)
    with pytest.raises(AuditChainBroken):
        JsonlAuditLog(path)
