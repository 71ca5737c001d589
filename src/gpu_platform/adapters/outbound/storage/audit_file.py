"""JsonlAuditLog: the audit chain (domain.model.audit_chain) as a JSON-lines file.

`append` chains the entry at once (its seq and hash are fixed under a short lock) and queues
the line; a writer thread writes whatever has queued as one batch and fsyncs the file once.
The head file (`<file>.head`: "seq hash", so `gpu-platform audit verify` also notices removed
last lines) is replaced atomically (written, fsynced, renamed) less often: at most `head_every`
seconds after the log got ahead of it, and at once on `flush()` and `close()`. The log carries
the chain, so a head left behind by a crash is rolled forward on open (below); at 1 client
that saves a second fsync and a rename per entry. No lock is held across an fsync, and a
request never waits for one: `flush()` waits until everything appended so far is on disk, head
included, and `tail` and `close` flush first (a graceful stop loses nothing; a crash loses at
most the batch being written).

With a key (`audit_seal`, setting `audit_key_file`) the head is sealed with an HMAC, so a
cut tail with a rewritten head, or a re-hashed chain, no longer verifies.

On open the existing file is verified; a broken chain refuses to start (AuditChainBroken) rather
than extend a log that can no longer be trusted. A crash between a batch's fsync and its head
replace leaves whole, chained lines beyond the head: they are verified against the old head
and the head is rolled forward over them; a torn last line is cut.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from gpu_platform.adapters import audit_seal
from gpu_platform.domain.model.audit_chain import GENESIS, ChainBreak, chain_entry, verify

__all__ = ["AuditChainBroken", "JsonlAuditLog", "read_head", "verify_file"]

log = structlog.get_logger(__name__)


class AuditChainBroken(Exception):
    """The audit file does not verify; the message names the first bad line."""


def read_head(path: Path) -> tuple[int, str] | None:
    """(seq, hash) of the head file (its seal, if any, unchecked); (-1, ...) if unreadable."""
    head = audit_seal.read_head(path, None)
    if isinstance(head, ChainBreak):
        return (-1, "unreadable head file")
    return head


def verify_file(path: Path, key: bytes | None = None) -> ChainBreak | int:
    """Verify `path` against its head file (when there is one; sealed, with `key`)."""
    return audit_seal.verify_file(path, key)


class JsonlAuditLog:
    """Implements AuditLog (batched; see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        key: bytes | None = None,
        *,
        adopt: bool = False,
        head_every: float = 0.05,
    ) -> None:
        """`key`: seal the head (`audit_seal`). `adopt`: the key is new, so an existing log's
        unsealed head is accepted once and sealed (never set it for an existing key).
        `head_every`: the most seconds the head file stays behind the written log."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._seq, self._prev = 0, GENESIS
        self._key = key
        check = None if adopt else key
        if self.path.exists():
            self._recover(check)
            result = verify_file(self.path, check)
            if isinstance(result, ChainBreak):
                raise AuditChainBroken(
                    f"audit log {self.path}: line {result.line}: {result.reason}"
                )
            if result:
                with self.path.open(encoding="utf-8") as f:
                    *_, last = f
                self._seq, self._prev = result, json.loads(last)["hash"]
                if adopt and key is not None:
                    self._write_head(self._seq, self._prev)
        self._file = self.path.open("a", encoding="utf-8")
        self._queued: list[str] = []  # chained lines not yet handed to the writer
        self._written, self._written_hash = self._seq, self._prev  # the log's fsynced end
        self._headed = self._seq  # the seq the head file holds
        self._head_every = head_every
        self._head_due = 0.0  # monotonic time by which a lagging head is replaced
        self._head_wanted = 0  # the highest seq a flush() waits to see in the head
        self._error: OSError | None = None
        self._closing = False
        self._writer = threading.Thread(target=self._write_batches, name="audit-writer")
        self._writer.daemon = True
        self._writer.start()

    def _recover(self, key: bytes | None) -> None:
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
        head = audit_seal.read_head(self.path, key)
        if head is None or isinstance(head, ChainBreak):
            return
        lines = data.decode("utf-8").splitlines(keepends=True)
        if len(lines) <= head[0] or verify(lines[: head[0]], head) != head[0]:
            return
        count = verify(lines, None)
        if count == len(lines):
            self._seq, self._prev = count, json.loads(lines[-1])["hash"]
            self._write_head(self._seq, self._prev)
            log.warning(
                "audit log: rolled the head forward over the last entries (a crash "
                "after they were written)",
                path=str(self.path),
                seq=count,
                entries=count - head[0],
            )

    def append(self, fields: Mapping[str, Any]) -> None:
        """Chain and queue one entry; it is on disk once a later `flush()` returns."""
        with self._lock:
            if self._closing:
                raise RuntimeError(f"audit log {self.path} is closed")
            line, digest = chain_entry(self._seq + 1, self._prev, fields)
            self._seq, self._prev = self._seq + 1, digest
            self._queued.append(line + "\n")
            self._changed.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Return once every entry appended before the call is on disk, head included
        (OSError if the writer failed; TimeoutError after `timeout` seconds)."""
        with self._lock:
            target = self._seq
            self._head_wanted = max(self._head_wanted, target)
            self._changed.notify_all()
            if not self._changed.wait_for(
                lambda: self._headed >= target or self._error is not None, timeout
            ):
                raise TimeoutError(f"audit log {self.path}: flush timed out")
            if self._error is not None:
                raise self._error

    def _next_work(self) -> tuple[list[str], int, str] | None:
        """Under the lock: the next batch (or `[]`: replace the head) with its end; None once
        closing and everything is written."""
        while True:
            lag = self._headed < self._written
            if lag and time.monotonic() >= self._head_due:  # first, or a busy log starves it
                return [], self._written, self._written_hash
            if self._queued:  # the batch is everything queued, so it ends at the newest entry
                batch, self._queued = self._queued, []
                return batch, self._seq, self._prev
            if lag and (self._closing or self._head_wanted > self._headed):
                return [], self._written, self._written_hash
            if self._closing:
                return None
            self._changed.wait(self._head_due - time.monotonic() if lag else None)

    def _write_batches(self) -> None:
        while True:
            with self._lock:
                work = self._next_work()
            if work is None:
                return
            batch, last_seq, last_hash = work
            try:  # no lock held: appends go on queueing behind this batch
                if batch:
                    self._file.write("".join(batch))
                    self._file.flush()
                    os.fsync(self._file.fileno())
                else:
                    self._write_head(last_seq, last_hash)
            except OSError as exc:
                log.exception("audit log: a batch could not be written", path=str(self.path))
                with self._lock:
                    self._error = exc
                    self._changed.notify_all()
                return
            with self._lock:
                if not batch:
                    self._headed = last_seq
                else:
                    if self._headed == self._written:  # the head starts lagging now
                        self._head_due = time.monotonic() + self._head_every
                    self._written, self._written_hash = last_seq, last_hash
                self._changed.notify_all()

    def _write_head(self, seq: int, digest: str) -> None:
        head = self.path.with_name(self.path.name + ".head")
        tmp = head.with_name(head.name + ".tmp")
        with tmp.open("w") as f:
            f.write(audit_seal.head_text(seq, digest, self._key))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(head)

    def tail(self, limit: int) -> list[dict[str, Any]]:
        self.flush()
        with self.path.open(encoding="utf-8") as f:
            lines = f.readlines()[-limit:] if limit > 0 else []
        return [json.loads(line) for line in lines]

    def close(self) -> None:
        """Write what is queued, stop the writer and close the file (idempotent)."""
        with self._lock:
            self._closing = True
            self._changed.notify_all()
        self._writer.join()
        if not self._file.closed:
            self._file.close()
        if self._error is not None:
            raise self._error
