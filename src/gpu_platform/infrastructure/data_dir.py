"""Keep a data directory private to the account that runs the server or agent.

The data directory holds the secrets and the state: the bootstrap `admin-token`, the
`cluster-token`, `state.db` (tenants, token digests, run-as grants), `raft.db`, the audit log
and the jobs' logs. Jobs run as other accounts (setting `job_user`), so none of it may be
readable by others: `harden_data_dir` makes the directory mode 0700 and every file directly in
it 0600 (directories 0700), owned by whoever runs the server. It runs when a server or agent
takes the directory's lock, before anything else is written.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["harden_data_dir"]


def harden_data_dir(data_dir: Path) -> list[str]:
    """Take group and other permissions off `data_dir` and its direct entries (symbolic links
    and sockets left alone); the names changed."""
    changed = []
    for path in (data_dir, *sorted(data_dir.iterdir())):
        with contextlib.suppress(FileNotFoundError):
            st = path.lstat()
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                continue
            if st.st_mode & 0o077:
                os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
                changed.append(path.name if path != data_dir else ".")
    return changed
