"""JsonlAuditLog: the audit chain (domain.model.audit_chain) as a JSON-lines file.

Each append writes one line and fsyncs the file, then replaces the head file (`<file>.head`:
"seq hash") atomically, so `gpu-platform audit verify` also notices a removed last line. On
open the existing file is verified; a broken chain refuses to start (AuditChainBroken) rather
than extend a log that can no longer be trusted.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from gpu_platform.domain.model.audit_chain import GENESIS, ChainBreak, chain_entry, verify

__all__ = ["AuditChainBroken", "JsonlAuditLog", "read_head", "verify_file"]

log = structlog.get_logger(__name__)


class AuditChainBroken(Exception):
    """The audit file does not verify; the message names the first bad line."""


def read_head(path: Path) -> tuple[int, str] | None:
    head = path.with_name(path.name + ".head")
    try:
        seq, digest = head.read_text().split()
        return int(seq), digest
    except FileNotFoundError:
        return None
    except ValueError:
        return (-1, "unreadable head file")


def verify_file(path: Path) -> ChainBreak | int:
    """Verify `path` against its head file (when there is one)."""
    with path.open(encoding="utf-8") as f:
        return verify(f, read_head(path))


class JsonlAuditLog:
    """Implements AuditLog."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._seq, self._prev = 0, GENESIS
        if self.path.exists():
            self._recover()
            result = verify_file(self.path)
            if isinstance(result, ChainBreak):
                raise AuditChainBroken(
                    f"audit log {self.path}: line {result.line}: {result.reason}"
                )
            if result:
                with self.path.open(encoding="utf-8") as f:
                    *_, last = f
                self._seq, self._prev = result, json.loads(last)["hash"]
        self._file = self.path.open("a", encoding="utf-8")

    def _recover(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with self.path.open("r+b") as f:
                f.truncate(keep)
                os.fsync(f.fileno())
            log.warning(
                "audit log: cut a torn last line (a crash during an append)",
                path=str(self.path),
                bytes=len(data) - keep,
            )
            data = data[:keep]
        head = read_head(self.path)
        if head is None or head[0] < 0:
            return
        lines = data.decode("utf-8").splitlines(keepends=True)
        if len(lines) != head[0] + 1 or verify(lines[:-1], head) != head[0]:
            return
        count = verify(lines, None)
        if count == head[0] + 1:
            self._seq, self._prev = count, json.loads(lines[-1])["hash"]
            self._write_head()
            log.warning(
                "audit log: rolled the head forward over the last entry (a crash "
                "after it was written)",
                path=str(self.path),
                seq=count,
            )

    def append(self, fields: Mapping[str, Any]) -> None:
        with self._lock:
            line, digest = chain_entry(self._seq + 1, self._prev, fields)
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
            self._seq, self._prev = self._seq + 1, digest
            self._write_head()

    def _write_head(self) -> None:
        head = self.path.with_name(self.path.name + ".head")
        tmp = head.with_name(head.name + ".tmp")
        with tmp.open("w") as f:
            f.write(f"{self._seq} {self._prev}\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(head)

    def tail(self, limit: int) -> list[dict[str, Any]]:
        with self._lock, self.path.open(encoding="utf-8") as f:
            lines = f.readlines()[-limit:] if limit > 0 else []
        return [json.loads(line) for line in lines]

    def close(self) -> None:
        with self._lock:
            self._file.close()
