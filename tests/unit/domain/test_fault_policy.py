"""XID classes follow NVIDIA's catalogue; ECC and thermal verdicts; restart backoff."""

from __future__ import annotations

import pytest

from gpu_platform.domain.faults.policy import (
    XID_CATALOGUE,
    EccVerdict,
    FaultPolicy,
    XidClass,
    classify_xid,
    ecc_verdict,
    retry_delay_s,
    thermal_hot,
)


@pytest.mark.parametrize(
    ("xid", "cls"),
    [
        (13, XidClass.JOB),  # graphics engine exception: RESTART_APP
        (31, XidClass.JOB),  # MMU page fault: RESTART_APP
        (43, XidClass.IGNORE),
        (63, XidClass.IGNORE),  # remap event: reset at convenience
        (48, XidClass.RESET),  # double-bit ECC: WORKFLOW_XID_48
        (64, XidClass.RESET),
        (74, XidClass.RESET),  # NVLink: WORKFLOW_NVLINK_ERR
        (94, XidClass.JOB),  # contained memory error
        (95, XidClass.RESET),  # uncontained memory error
        (79, XidClass.REBOOT),  # fell off the bus: RESTART_BM
        (54, XidClass.UNHEALTHY),  # aux power: CHECK_MECHANICALS
        (142, XidClass.UNHEALTHY),  # CONTACT_SUPPORT
        (147, XidClass.RESET),  # NVLink5 workflow
    ],
)
def test_xids_are_classified_by_the_catalogues_immediate_action(xid: int, cls: XidClass) -> None:
    assert classify_xid(xid) is cls


def test_an_unknown_xid_is_treated_as_unhealthy() -> None:
    assert 999 not in XID_CATALOGUE
    assert classify_xid(999) is XidClass.UNHEALTHY


def test_an_override_replaces_the_catalogue_class() -> None:
    policy = FaultPolicy(xid_overrides=((109, XidClass.JOB), (79, XidClass.RESET)))
    assert classify_xid(109) is XidClass.RESET
    assert classify_xid(109, policy) is XidClass.JOB
    assert classify_xid(79, policy) is XidClass.RESET


def test_the_catalogue_gives_each_xid_one_class() -> None:
    assert all(isinstance(c, XidClass) for c in XID_CATALOGUE.values())


def ecc(**kw: object) -> EccVerdict:
    args: dict[str, object] = dict(
        corrected=0,
        uncorrected=0,
        remap_pending=False,
        remap_failed=False,
        seen_uncorrected=0,
        alerted=False,
    )
    args.update(kw)
    return ecc_verdict(FaultPolicy(ecc_corrected_alert=10), **args)  # type: ignore[arg-type]


def test_ecc_verdicts_order_remap_failure_over_reset_over_alert() -> None:
    assert ecc() is EccVerdict.OK
    assert ecc(corrected=9) is EccVerdict.OK
    assert ecc(corrected=10) is EccVerdict.ALERT
    assert ecc(corrected=10, alerted=True) is EccVerdict.OK
    assert ecc(uncorrected=1) is EccVerdict.RESET
    assert ecc(uncorrected=1, seen_uncorrected=1) is EccVerdict.OK
    assert ecc(remap_pending=True, corrected=50) is EccVerdict.RESET
    assert ecc(remap_failed=True, uncorrected=3) is EccVerdict.OFFLINE


def test_a_gpu_is_hot_from_the_high_mark_until_it_cools_below_the_low_mark() -> None:
    p = FaultPolicy(thermal_hot_c=90, thermal_cool_c=80)
    assert not thermal_hot(p, was_hot=False, temperature_c=85, reasons=0)
    assert thermal_hot(p, was_hot=False, temperature_c=90, reasons=0)
    assert thermal_hot(p, was_hot=True, temperature_c=85, reasons=0)  # hysteresis
    assert not thermal_hot(p, was_hot=True, temperature_c=80, reasons=0)
    assert thermal_hot(p, was_hot=False, temperature_c=40, reasons=0x40)  # hw thermal slowdown
    assert thermal_hot(p, was_hot=True, temperature_c=40, reasons=0x20)
    assert not thermal_hot(p, was_hot=False, temperature_c=40, reasons=0x4)  # power cap only


def test_a_policy_with_inverted_thresholds_is_refused() -> None:
    with pytest.raises(ValueError, match="hysteresis"):
        FaultPolicy(thermal_hot_c=80, thermal_cool_c=90)
    with pytest.raises(ValueError, match="node_down_after_s"):
        FaultPolicy(node_suspect_after_s=30, node_down_after_s=10)


def test_restart_backoff_doubles_per_attempt_up_to_the_cap() -> None:
    p = FaultPolicy(max_backoff_s=10)
    assert [retry_delay_s(p, 1.0, a) for a in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 10]
    assert retry_delay_s(p, 0.0, 7) == 0
