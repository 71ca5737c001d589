"""`submit`'s sharing options become the REST body's fields, and `gpus`, `status`, `jobs`
show shares (pure helpers of the CLI; the real CLI runs in the integration tests)."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.inbound.cli.sharing_opts import (
    gpus_text,
    share_body,
    share_cell,
    shared_text,
)


def test_the_options_become_milli_units_on_the_wire() -> None:
    body = share_body("0.25", "10G", "1.5", "nvidia", "mps")
    assert body == {
        "gpus": 1,
        "gpu_milli": 250,
        "gpu_memory_bytes": 10 << 30,
        "cpu_milli": 1500,
        "vendor": "nvidia",
        "sharing": "mps",
    }
    assert share_body("2", None, None, None, None) == {"gpus": 2}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("1.5", None, None, None, None), "gpus"),
        (("0.5", "ten", None, None, None), "gpu_memory"),
        (("1", None, "-2", None, None), "cpus"),
        (("1", None, None, "3dfx", None), "vendor"),
        (("0.5", None, None, None, "mig"), "sharing"),
    ],
)
def test_bad_options_are_one_line_naming_the_field(
    args: tuple[str, str | None, str | None, str | None, str | None], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        share_body(*args)


def test_a_shared_gpu_lists_each_sharer_and_the_memory_they_pin() -> None:
    gib = 1 << 30
    shares = [
        {"job_id": "j-1", "gpu_milli": 250, "pinned_memory_bytes": 10 * gib, "sharing": "mps"},
        {"job_id": "j-2", "gpu_milli": 500, "pinned_memory_bytes": 20 * gib, "sharing": "mps"},
    ]
    cell = share_cell({"job_id": "j-1", "shares": shares})
    assert cell == "j-1(0.25),j-2(0.5) [2 mps, 30 GiB pinned]"
    assert share_cell({"job_id": None, "shares": []}) == "-"
    assert shared_text({"gpus_shared": 1, "shares": 2}) == ", 1 shared by 2 jobs"
    assert shared_text({"gpus_shared": 0, "shares": 0}) == ""


def test_a_jobs_gpus_read_as_asked() -> None:
    share = {"gpus": 1, "gpu_milli": 250, "sharing": "mps", "gpu_memory_bytes": 10 << 30}
    assert gpus_text(share) == "0.25"
    assert gpus_text(share, detail=True) == "0.25 (mps, 10 GiB GPU memory)"
    assert gpus_text({"gpus": 2, "gpu_milli": 1000, "cpu_milli": 4000}, detail=True) == "2 (4 CPUs)"
    assert gpus_text({"gpus": 2}) == "2"  # a record from before sharing
