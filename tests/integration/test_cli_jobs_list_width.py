"""`jobs list` on an 80-column terminal, against a real server (issue 19 item 10): the
header and one line per job, each at most 80 columns, every id in full."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from tests.integration.conftest import ENTRY, Server


def test_jobs_list_fits_80_columns_with_full_ids(server_factory: Callable[..., Server]) -> None:
    server = server_factory()
    ids = []
    for name in ("a-rather-long-job-name-for-a-narrow-terminal", "short"):
        r = server.cli("submit", "-q", "--name", name, "--gpus", "1", "--", "sleep", "0.1")
        assert r.returncode == 0, r.stderr
        ids.append(r.stdout.strip())
    env = dict(server.env, GPU_PLATFORM_SERVER=server.url, COLUMNS="80")
    listed = subprocess.run(
        [*ENTRY, "jobs", "list"], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    lines = listed.stdout.rstrip("\n").split("\n")
    assert len(lines) == 1 + len(ids), listed.stdout
    assert all(len(line) <= 80 for line in lines), listed.stdout
    assert [line.split()[0] for line in lines[1:]] == ids  # oldest first, ids uncut
