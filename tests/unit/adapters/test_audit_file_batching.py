"""The audit file batches appends under one fsync off the caller's path, and loses nothing
that was flushed — nor anything at a graceful close — while the chain still verifies. The
head file follows the log (at most `head_every` behind) and is rolled forward after a crash."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpu_platform.adapters.audit_seal import load_key
from gpu_platform.adapters.audit_seal import verify_file as seal_verify
from gpu_platform.adapters.outbound.storage.audit_file import (
    AuditChainBroken,
    JsonlAuditLog,
    read_head,
    verify_file,
)


def test_concurrent_appends_all_land_in_one_verifying_chain_at_close(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = JsonlAuditLog(path)

    def writer(w: int) -> None:
        for i in range(50):
            log.append({"action": "test", "writer": w, "i": i})

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    assert verify_file(path) == 400
    assert read_head(path) is not None and read_head(path)[0] == 400  # type: ignore[index]


def test_flush_returns_once_every_earlier_append_is_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = JsonlAuditLog(path)
    for i in range(10):
        log.append({"action": "test", "i": i})
    log.flush()
    assert verify_file(path) == 10  # a reader of the file sees all ten, head included
    assert [e["i"] for e in log.tail(3)] == [7, 8, 9]
    log.close()


def test_a_crash_keeps_what_was_flushed_and_the_chain_still_verifies(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    script = (
        "import os, sys\n"
        "from gpu_platform.adapters.outbound.storage.audit_file import JsonlAuditLog\n"
        "log = JsonlAuditLog(sys.argv[1])\n"
        "for i in range(100): log.append({'action': 'test', 'i': i})\n"
        "log.flush()\n"
        "for i in range(100, 150): log.append({'action': 'test', 'i': i})\n"
        "os._exit(9)  # no close: queued entries may or may not have reached the disk\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(path)], check=False, timeout=60)
    assert run.returncode == 9
    log = JsonlAuditLog(path)  # recovery: a torn line is cut, a lagging head rolled forward
    log.append({"action": "after"})
    log.close()
    count = verify_file(path)
    assert isinstance(count, int) and 101 <= count <= 151
    assert [e["i"] for e in _entries(path)[:100]] == list(range(100))


def test_a_head_left_several_entries_behind_is_rolled_forward(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = JsonlAuditLog(path)
    for i in range(3):
        log.append({"action": "test", "i": i})
    log.close()
    head_before = path.with_name("audit.jsonl.head").read_text()
    log = JsonlAuditLog(path)
    for i in range(3, 8):  # one batch of five written, then the head replace never ran
        log.append({"action": "test", "i": i})
    log.close()
    path.with_name("audit.jsonl.head").write_text(head_before)
    JsonlAuditLog(path).close()
    assert read_head(path) is not None and read_head(path)[0] == 8  # type: ignore[index]
    assert verify_file(path) == 8


def test_the_head_lags_the_log_between_batches_and_a_crash_there_is_recovered_and_sealed(
    tmp_path: Path,
) -> None:
    path, key_file = tmp_path / "audit.jsonl", tmp_path / "etc" / "audit.key"
    load_key(key_file, create=True)
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from gpu_platform.adapters.audit_seal import load_key\n"
        "from gpu_platform.adapters.outbound.storage.audit_file import JsonlAuditLog, read_head\n"
        "path, key = Path(sys.argv[1]), load_key(Path(sys.argv[2]))\n"
        "log = JsonlAuditLog(path, key, head_every=3600)\n"
        "for i in range(3): log.append({'action': 'test', 'i': i})\n"
        "log.flush()  # the head holds 3\n"
        "for i in range(3, 7): log.append({'action': 'test', 'i': i})\n"
        "deadline = time.monotonic() + 30\n"
        "while path.read_text().count(chr(10)) < 7 and time.monotonic() < deadline:\n"
        "    time.sleep(0.005)  # the writer fsyncs the batch; the head stays behind\n"
        "assert read_head(path)[0] == 3, read_head(path)\n"
        "os._exit(9)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(path), str(key_file)], check=False, timeout=60
    )
    assert run.returncode == 9
    key = load_key(key_file)
    assert path.read_text().count("\n") == 7
    JsonlAuditLog(path, key).close()  # the head is rolled forward over 4..7 and sealed
    assert seal_verify(path, key) == 7
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # the recovered head still catches a cut tail
    with pytest.raises(AuditChainBroken):
        JsonlAuditLog(path, key)


def _entries(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
