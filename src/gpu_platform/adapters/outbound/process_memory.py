"""Keeping the C allocator's idle memory small in the long-running server (issue 21).

Theory of operation. Python objects above 512 bytes, and everything the C libraries (gRPC,
SQLite) allocate, come from the C library's `malloc`. glibc's malloc keeps memory it was given
back for reuse instead of returning it to the OS, and gives every thread that allocates its
own arena (up to 8 per core), each of which fragments on its own: a server with ~30 threads
(gRPC, Raft, the HTTP servers) that builds and drops a snapshot of tens of MiB holds on to a
large part of that peak for good. Two glibc calls bound it:

* `limit_malloc_arenas(n)` — `mallopt(M_ARENA_MAX, n)`, what the `MALLOC_ARENA_MAX`
  environment variable does; call it before threads start allocating.
* `release_free_memory()` — `malloc_trim(0)`: hand the free pages of every arena back to the
  OS (after a snapshot is written, for instance).

Both return False and do nothing where the C library is not glibc (musl, macOS).
"""

from __future__ import annotations

import ctypes
import logging
from functools import cache

__all__ = ["limit_malloc_arenas", "release_free_memory"]

log = logging.getLogger(__name__)

_M_ARENA_MAX = -8  # glibc's malloc.h


@cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def limit_malloc_arenas(arenas: int) -> bool:
    """At most `arenas` malloc arenas from now on (glibc); False where unsupported."""
    if arenas < 1:
        raise ValueError(f"arenas must be >= 1, got {arenas}")
    libc = _libc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_ARENA_MAX, arenas))
    if not ok:
        log.warning("mallopt(M_ARENA_MAX, %d) was refused", arenas)
    return ok


def release_free_memory() -> bool:
    """Return the allocator's free pages to the OS (glibc); False where unsupported."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
