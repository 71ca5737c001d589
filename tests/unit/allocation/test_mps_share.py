from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.allocation import MpsLedger, MpsShare, mps_environment
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound

MIB = 1 << 20
GIB = 1 << 30


def test_a_share_becomes_the_two_mps_client_variables() -> None:
    env = mps_environment(MpsShare("j1", 25, 10 * GIB))
    assert env == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240MB",
    }


def test_the_memory_limit_is_rounded_down_to_whole_mib_for_the_given_ordinal() -> None:
    env = mps_environment(MpsShare("j1", 50, 3 * MIB - 1), device_ordinal=1)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "1=2MB"


@pytest.mark.parametrize(("pct", "mem"), [(0, GIB), (101, GIB), (50, MIB - 1)])
def test_an_out_of_range_share_is_refused(pct: int, mem: int) -> None:
    with pytest.raises(InvalidRequest):
        MpsShare("j", pct, mem)


def test_pinned_memory_is_never_oversubscribed() -> None:
    ledger = MpsLedger("GPU-0", 80 * GIB).admit(MpsShare("a", 30, 60 * GIB))
    with pytest.raises(Conflict, match="pinned memory"):
        ledger.admit(MpsShare("b", 30, 21 * GIB))
    ledger = ledger.admit(MpsShare("b", 30, 20 * GIB))
    assert ledger.free_memory_bytes == 0


def test_compute_is_capped_at_the_configured_total() -> None:
    ledger = MpsLedger("GPU-0", 80 * GIB).admit(MpsShare("a", 70, GIB))
    assert ledger.admits(MpsShare("b", 40, GIB)) is not None
    relaxed = MpsLedger("GPU-0", 80 * GIB, max_compute_percent=200).admit(MpsShare("a", 70, GIB))
    assert relaxed.admit(MpsShare("b", 40, GIB)).compute_percent == 110


def test_one_share_per_job_and_release_of_an_unknown_job_is_not_found() -> None:
    ledger = MpsLedger("GPU-0", 80 * GIB).admit(MpsShare("a", 10, GIB))
    with pytest.raises(Conflict):
        ledger.admit(MpsShare("a", 10, GIB))
    assert ledger.release("a").shares == ()
    with pytest.raises(NotFound):
        ledger.release("zz")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 100), st.integers(1, 40)), max_size=12))
def test_admitting_whatever_fits_keeps_the_ledger_within_the_gpu(
    requests: list[tuple[int, int]],
) -> None:
    ledger = MpsLedger("GPU-0", 80 * GIB)
    for i, (pct, gib) in enumerate(requests):
        share = MpsShare(f"j{i}", pct, gib * GIB)
        if ledger.admits(share) is None:
            ledger = ledger.admit(share)
        ledger.check_invariants()
