"""The audit chain's anchor: its head sealed with a key kept outside the data directory.

The chain (domain.model.audit_chain) is unkeyed SHA-256, so whoever can write the data
directory can cut the tail *and* rewrite the head file, or edit an entry and re-hash the whole
chain after it: `audit verify` would pass. With `audit_key_file` set, the head file carries a
third field, HMAC-SHA256(key, "seq hash"):

    <seq> <hash> <hmac>

and verification with the key requires it (a log with entries but no sealed head does not
verify). Without the key nobody can write a seal that matches, so both attacks fail. The key
file holds 32 random bytes as hex, mode 0600; keep it where jobs and the data directory's
backups do not reach (e.g. /etc/gpu-platform/audit.key, readable by the server only). A copy
of an old log *and* its old sealed head can still be put back whole (a rollback): ship the
log elsewhere if that matters.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from gpu_platform.domain.model.audit_chain import ChainBreak, verify

__all__ = ["head_path", "head_text", "load_key", "read_head", "seal", "verify_file"]


def head_path(path: Path) -> Path:
    return path.with_name(path.name + ".head")


def load_key(path: Path, *, create: bool = False) -> bytes:
    """The key in `path` (hex); with `create`, a new one is written (0600) if it is missing.
    ValueError for a file that is not a key."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        if not create:
            raise
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{path}: not an audit key (hex expected)") from None
    if len(key) < 16:
        raise ValueError(f"{path}: audit key too short ({len(key)} bytes; 16 at least)")
    return key


def seal(key: bytes, seq: int, digest: str) -> str:
    return hmac.new(key, f"{seq} {digest}".encode(), hashlib.sha256).hexdigest()


def head_text(seq: int, digest: str, key: bytes | None) -> str:
    """The head file's content for the newest entry (sealed when there is a key)."""
    return f"{seq} {digest} {seal(key, seq, digest)}\n" if key else f"{seq} {digest}\n"


def read_head(path: Path, key: bytes | None) -> tuple[int, str] | ChainBreak | None:
    """(seq, hash) of the head file of the log at `path`; None if there is none; a ChainBreak
    when it is unreadable, or - with `key` - not sealed or sealed with another key."""
    try:
        fields = head_path(path).read_text().split()
    except FileNotFoundError:
        return None
    try:
        seq, digest = int(fields[0]), fields[1]
    except (IndexError, ValueError):
        return ChainBreak(0, f"{head_path(path)}: unreadable head file")
    if key is not None:
        if len(fields) < 3:
            return ChainBreak(seq, "the head is not sealed (audit_key_file is set)")
        if not hmac.compare_digest(fields[2], seal(key, seq, digest)):
            return ChainBreak(seq, "the head's seal does not match: cut or re-hashed")
    return seq, digest


def verify_file(path: Path, key: bytes | None = None) -> ChainBreak | int:
    """Verify the log at `path` against its head file; with `key` the head must be sealed."""
    head = read_head(path, key)
    if isinstance(head, ChainBreak):
        return head
    with path.open(encoding="utf-8") as f:
        result = verify(f, head)
    if key is not None and head is None and not isinstance(result, ChainBreak) and result:
        # entries, and the head file is gone
        return ChainBreak(result, "no sealed head file (audit_key_file is set)")
    return result
