"""The data directory is private to the server's account, and jobs default to an unprivileged
account in their own PID namespace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.server import lock_data_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_taking_the_lock_makes_the_data_directory_and_its_files_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    for name in ("admin-token", "state.db", "raft.db"):
        (data / name).write_text("x")
        os.chmod(data / name, 0o644)
    (data / "jobs").mkdir(mode=0o755)
    os.chmod(data / "jobs", 0o755)
    (data / "link").symlink_to("/etc/hostname")
    lock = lock_data_dir(data)
    try:
        assert mode(data) == 0o700 and mode(data / "jobs") == 0o700
        assert {mode(data / n) for n in ("admin-token", "state.db", "raft.db", "lock")} == {0o600}
        assert (data / "link").is_symlink()  # links are left alone (not followed)
    finally:
        lock.close()


def test_jobs_default_to_nobody_in_their_own_pid_namespace() -> None:
    fields = Settings.model_fields
    assert fields["job_user"].default == "nobody"
    assert fields["job_pid_namespace"].default is True
