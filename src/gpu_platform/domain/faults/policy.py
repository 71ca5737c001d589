"""Fault classification: XIDs by NVIDIA's catalogue, ECC and thermal verdicts, restart backoff.

XID classes follow the "Resolution Bucket (Immediate Action)" of NVIDIA's Xid catalogue
(research/hardware.md §5.4):

    IGNORE     informational (IGNORE bucket, secondary Xid 45): logged, nothing changes
    JOB        RESTART_APP: the application's own fault; the GPU stays healthy and only the
               attempt on it is stopped and re-queued by its restart policy
    UNHEALTHY  CHECK_MECHANICALS / CONTACT_SUPPORT / UPDATE_SWFW / CHECK_UVM / XID_154 and
               unknown Xids: the GPU is DEGRADED (drained, its jobs stopped) until an operator
    RESET      RESET_GPU / WORKFLOW_XID_48 / WORKFLOW_NVLINK*: jobs stopped, GPU reset
    REBOOT     RESTART_BM / RESTART_VM (79: fell off the bus): the GPU goes OFFLINE

Overrides (`FaultPolicy.xid_overrides`) replace the catalogue's class for given Xids.

All functions are pure: thresholds come in a `FaultPolicy`, readings in arguments.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "THERMAL_CLOCK_REASONS",
    "XID_CATALOGUE",
    "EccVerdict",
    "FaultPolicy",
    "XidClass",
    "classify_xid",
    "ecc_verdict",
    "retry_delay_s",
    "thermal_hot",
]


class XidClass(enum.StrEnum):
    IGNORE = "ignore"
    JOB = "job"
    UNHEALTHY = "unhealthy"
    RESET = "reset"
    REBOOT = "reboot"


_X = XidClass
_JOB: tuple[int, ...] = (
    8,
    11,
    13,
    25,
    31,
    32,
    39,
    40,
    41,
    60,
    68,
    69,
    70,
    71,
    72,
    75,
    76,
    77,
    80,
    82,
    83,
)
_JOB += (84, 85, 86, 87, 88, 89, 94, *range(96, 106), *range(126, 136), 139)
_IGNORE: tuple[int, ...] = (
    37,
    38,
    43,
    44,
    45,
    63,
    66,
    67,
    92,
    93,
    106,
    107,
    121,
    137,
    141,
    152,
    153,
    157,
    160,
)
_IGNORE += (161,)
_RESET: tuple[int, ...] = (
    46,
    48,
    62,
    64,
    74,
    95,
    109,
    110,
    119,
    120,
    136,
    140,
    143,
    *range(144, 151),
    155,
)
_RESET += (156, 158, 167, 169)
_RANGES: list[tuple[XidClass, tuple[int, ...]]] = [
    (_X.JOB, _JOB),
    (_X.IGNORE, _IGNORE),
    (_X.RESET, _RESET),
    (_X.REBOOT, (79, 151)),
    (_X.UNHEALTHY, (54, 78, 142, 154, 159)),
]

#: Xid -> class, from NVIDIA's catalogue; Xids not listed are UNHEALTHY (the safe side).
XID_CATALOGUE: dict[int, XidClass] = {xid: cls for cls, xids in _RANGES for xid in xids}

#: NVML clock-event reason bits that mean "slowed down because hot" (sw 0x20, hw 0x40).
THERMAL_CLOCK_REASONS = 0x20 | 0x40


@dataclass(frozen=True, slots=True)
class FaultPolicy:
    """Thresholds for health verdicts. Temperatures in °C, durations in seconds.

    A GPU becomes "hot" (no new placements) at `thermal_hot_c` or when its clocks report a
    thermal slowdown, and cools only at or below `thermal_cool_c` with no thermal slowdown —
    the gap is the hysteresis. `ecc_corrected_alert` corrected (single-bit) errors raise one
    alert. Nodes go SUSPECT after `node_suspect_after_s` without a heartbeat and DOWN after
    `node_down_after_s`. Re-queued attempts wait `retry_backoff_s * 2**(attempt-1)`, at most
    `max_backoff_s`.
    """

    xid_overrides: tuple[tuple[int, XidClass], ...] = ()
    ecc_corrected_alert: int = 1000
    thermal_hot_c: float = 90.0
    thermal_cool_c: float = 80.0
    node_suspect_after_s: float = 15.0
    node_down_after_s: float = 60.0
    max_backoff_s: float = 300.0

    def __post_init__(self) -> None:
        if self.thermal_cool_c > self.thermal_hot_c:
            raise ValueError("thermal_cool_c must not exceed thermal_hot_c (hysteresis)")
        if self.node_down_after_s < self.node_suspect_after_s:
            raise ValueError("node_down_after_s must not be below node_suspect_after_s")
        if self.ecc_corrected_alert < 1:
            raise ValueError("ecc_corrected_alert must be >= 1")


def classify_xid(xid: int, policy: FaultPolicy = FaultPolicy()) -> XidClass:
    """The class of `xid`: an override if one names it, else the catalogue, else UNHEALTHY."""
    for code, cls in policy.xid_overrides:
        if code == xid:
            return cls
    return XID_CATALOGUE.get(xid, XidClass.UNHEALTHY)


class EccVerdict(enum.StrEnum):
    OK = "ok"
    ALERT = "alert"  # corrected errors crossed the alert threshold (once)
    RESET = "reset"  # new uncorrectable errors, or a row remap pending: drain and reset
    OFFLINE = "offline"  # a row remap failed: the memory cannot be repaired in place


def ecc_verdict(
    policy: FaultPolicy,
    *,
    corrected: int,
    uncorrected: int,
    remap_pending: bool,
    remap_failed: bool,
    seen_uncorrected: int,
    alerted: bool,
) -> EccVerdict:
    """Judge one ECC reading. `seen_uncorrected` is the uncorrected count already acted on
    (a reset clears volatile counters; a count that did not grow is old news); `alerted` says
    whether the corrected-error alert was already raised for this GPU."""
    if remap_failed:
        return EccVerdict.OFFLINE
    if remap_pending or uncorrected > seen_uncorrected:
        return EccVerdict.RESET
    if corrected >= policy.ecc_corrected_alert and not alerted:
        return EccVerdict.ALERT
    return EccVerdict.OK


def thermal_hot(policy: FaultPolicy, *, was_hot: bool, temperature_c: float, reasons: int) -> bool:
    """Hysteresis: hot from `thermal_hot_c` (or a thermal clock slowdown) until the GPU is at
    or below `thermal_cool_c` with no thermal slowdown."""
    throttled = bool(reasons & THERMAL_CLOCK_REASONS)
    if throttled or temperature_c >= policy.thermal_hot_c:
        return True
    if was_hot:
        return temperature_c > policy.thermal_cool_c
    return False


def retry_delay_s(policy: FaultPolicy, backoff_s: float, attempt: int) -> float:
    """Seconds a job re-queued after attempt number `attempt` (1-based) waits before binding."""
    if backoff_s <= 0:
        return 0.0
    return float(min(policy.max_backoff_s, backoff_s * 2 ** max(0, attempt - 1)))
