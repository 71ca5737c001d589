"""`jobs list` fits a terminal from 80 columns up: one line per job, ids never cut."""

from __future__ import annotations

import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from gpu_platform.adapters.inbound.cli.jobs_view import age, jobs_table

NOW = 1_800_000_000.0
STATES = ("QUEUED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
# Letters (CJK ones are two cells wide), digits, punctuation such as rich's `[markup]`.
text = st.text(st.characters(categories=("L", "N", "P", "Zs")), max_size=120)


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    tasks = draw(st.integers(0, 4))
    allocation = (
        {
            "tasks": [
                {"node": f"node-{draw(st.integers(0, 999))}", "gpu_indices": list(range(8))}
                for _ in range(tasks)
            ]
        }
        if tasks
        else None
    )
    pending = draw(st.none() | st.fixed_dictionaries({"code": text, "message": text}))
    return {
        "id": "j-" + draw(st.text("0123456789abcdef", min_size=12, max_size=12)),
        "name": draw(st.none() | text),
        "tenant": draw(text.filter(bool)),
        "state": draw(st.sampled_from(STATES)),
        "gpus": draw(st.integers(0, 4096)),
        "allocation": allocation,
        "submitted_at": NOW - draw(st.floats(0, 1e8)),
        "reason": draw(text),
        "pending": pending,
    }


def render(rows: list[dict[str, Any]], width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(jobs_table(rows, NOW, width))
    return out.getvalue().rstrip("\n").split("\n")


@settings(deadline=None)  # rich's rendering is slow on a loaded machine; the checks are not timed
@given(st.lists(jobs(), min_size=1, max_size=8), st.integers(80, 240))
def test_every_job_is_one_line_within_the_width_with_its_full_id(
    rows: list[dict[str, Any]], width: int
) -> None:
    lines = render(rows, width)
    assert len(lines) == 1 + len(rows)  # the header, then one line per job
    assert all(cell_len(line) <= width for line in lines)
    for job, line in zip(rows, lines[1:], strict=True):
        assert line.startswith(job["id"] + " ")
        assert f" {job['state']} " in line


def test_a_wide_terminal_shows_every_field_uncut_and_literal() -> None:
    job = {
        "id": "j-614a2b3c4d5e",
        "name": "[bold]train",
        "tenant": "research",
        "state": "RUNNING",
        "gpus": 2,
        "allocation": {"node": "node-0", "gpu_indices": [0, 1]},
        "submitted_at": NOW - 90,
        "reason": "scheduled",
    }
    header, line = render([job], 120)
    assert header.split() == [
        "ID", "NAME", "TENANT", "STATE", "GPUS", "ASSIGNED", "AGE", "REASON"
    ]  # fmt: skip
    assert line.split() == [
        "j-614a2b3c4d5e", "[bold]train", "research", "RUNNING", "2", "node-0:0,1", "1m", "scheduled"
    ]  # fmt: skip


def test_age_reads_like_kubectl() -> None:
    assert [age(s) for s in (-3, 0, 59, 60, 3599, 3600, 86399, 86400 * 12)] == [
        "0s", "0s", "59s", "1m", "59m", "1h", "23h", "12d"
    ]  # fmt: skip
