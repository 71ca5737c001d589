"""The session-end check of tests/conftest.py finds what a test leaves behind (issue 19 item 6)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import SESSION_MARKER, instance_of, marked_processes, session_instances


def test_a_detached_process_started_by_a_test_is_found_by_its_session_marker() -> None:
    marker = os.environ[SESSION_MARKER]
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)  # left its session
    try:
        assert proc.pid in marked_processes(marker, exclude=os.getpid())
        assert "sleep 600" in marked_processes(marker, exclude=os.getpid())[proc.pid]
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in marked_processes(marker, exclude=os.getpid())


def test_job_cgroups_are_attributed_to_the_data_directories_of_this_session(
    tmp_path: Path,
) -> None:
    data = tmp_path / "a" / "data"
    data.mkdir(parents=True)
    assert instance_of(data) in session_instances(tmp_path)
