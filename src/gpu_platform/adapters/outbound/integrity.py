"""Storage integrity: record checksums and the watermark file that outlives a lost database.

Theory of operation. Two kinds of damage are told apart and both stop a server at start-up:

* **Corruption** — a record whose bytes changed (a flipped bit, a torn page): every stored
  record carries a CRC-32 (`zlib.crc32`, the checksum etcd's WAL uses in its Castagnoli
  form) over all of its fields, verified when the store opens. SQLite's own "malformed"
  errors land here too.
* **Loss** — a database that is empty, deleted, truncated or missing its `-wal` file: the
  store writes a small *watermark* file beside the database (`raft.db` → `raft.mark`) after
  each durable write, recording how far the database had got (Raft: term, commit and last
  index; the other stores: a write counter) and, for Raft, whose data it is (member and
  cluster). A database that is behind its watermark has lost acknowledged writes.

The watermark is written after the database commit it describes (and, before a write that
legitimately moves it back, such as a log truncation, first lowered), so it never claims more
than the database durably holds; it is written without its own fsync — it survives a process
crash and an operator deleting files, and after a power loss it can only be behind.

Errors::

    StorageError            one line: the file, what is wrong, what to do
    ├── StorageCorrupt      a checksum mismatch or unreadable file
    └── StorageLost         the database is behind its watermark (data gone)
"""

from __future__ import annotations

import json
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import Any

__all__ = [
    "RECOVERY_HINT",
    "StorageCorrupt",
    "StorageError",
    "StorageLost",
    "Watermark",
    "entry_crc",
    "record_crc",
]

#: What an operator does about a refused start (docs/replication.md, "Storage integrity").
RECOVERY_HINT = (
    "restore the data dir from a backup, or move it aside and rejoin as a new member "
    "(`gpu-platform serve --id NEW_ID --peers MEMBERS,NEW_ID=HOST:PORT --join`, then "
    "`gpu-platform cluster add-server NEW_ID HOST:PORT` on the leader; "
    "docs/replication.md, 'Storage integrity')"
)


class StorageError(Exception):
    """A store refuses to open; the message is one line for the operator."""


class StorageCorrupt(StorageError):
    """A stored record fails its checksum, or SQLite cannot read the file."""


class StorageLost(StorageError):
    """The database holds less than its watermark says it durably held."""


_ENTRY_HEAD = struct.Struct("<qqq")


def entry_crc(index: int, term: int, kind: int, data: bytes) -> int:
    """CRC-32 of a Raft log entry: index, term, type and payload."""
    return zlib.crc32(data, zlib.crc32(_ENTRY_HEAD.pack(index, term, kind)))


def record_crc(key: str, value: bytes) -> int:
    """CRC-32 of a keyed record (a meta row, a job body)."""
    return zlib.crc32(value, zlib.crc32(key.encode() + b"\0"))


_LOCK = threading.Lock()  # stores sharing one database merge into one watermark file
_SIZE = 512  # one sector: the file is rewritten in place, never truncated


class Watermark:
    """The watermark file of one database: a JSON object and its CRC, in one sector.

    `read()` gives the recorded object ({} when there is none yet); `update(**fields)`
    merges fields in and rewrites the file in place (no fsync, see the module docstring).
    """

    def __init__(self, db_path: Path) -> None:
        self.path = db_path.with_suffix(".mark")
        self._fd: int | None = None  # kept open once written: a write is one pwrite

    def read(self) -> dict[str, Any]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        text = raw.rstrip(b"\0 \n")
        body, _, crc = text.rpartition(b" ")
        try:
            ok = int(crc, 16) == zlib.crc32(body)
            value = json.loads(body) if ok else None
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise StorageCorrupt(
                f"{self.path} is corrupt (its checksum does not match); if "
                f"{self.path.with_suffix('.db').name} is known good, delete {self.path.name} "
                "and start again, otherwise " + RECOVERY_HINT
            )
        return value

    def update(self, **fields: Any) -> None:
        """Merge `fields` into the recorded object (stores sharing one database do this)."""
        with _LOCK:
            current = self.read()
            current.update(fields)
            self.write(current)

    def write(self, value: dict[str, Any]) -> None:
        """Replace the recorded object (a store that owns its watermark alone)."""
        body = json.dumps(value, separators=(",", ":")).encode()
        line = body + b" %08x\n" % zlib.crc32(body)
        if len(line) > _SIZE:
            raise ValueError(f"{self.path}: watermark over {_SIZE} bytes")
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.pwrite(self._fd, line.ljust(_SIZE, b"\0"), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
