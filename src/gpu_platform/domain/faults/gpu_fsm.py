"""The GPU health/admin lifecycle as one transition table.

Theory of operation: a GPU's own state (`Gpu.state`) moves only by feeding a `GpuInput` to
`gpu_transition`. Hardware findings (an XID, an ECC verdict, a lost device, a reset's outcome)
and operator actions (drain, offline, online) are both inputs. ALLOCATED and IN_USE are not
in this table: they are derived from the job holding the GPU (`ClusterState.gpu_state`).

Hardware inputs are legal in every state, because hardware does not ask first: a fault on a GPU
that is already worse off changes nothing. Operator inputs that contradict a reset in flight
(drain or online while RESETTING) are illegal and raise `IllegalTransition`, as are reset
outcomes for a GPU that was not being reset.

Effects tell the caller what else to do; the cluster state machine carries them out:
STOP_JOBS stops the attempts holding the GPU (they are re-queued by their restart policy or
fail with the fault as reason); RESET asks the GpuController to reset the GPU once no attempt
holds it, after which RESET_OK / RESET_FAILED is fed back.

    AVAILABLE --drain--> DRAINING --online--> AVAILABLE      (running work finishes)
    AVAILABLE|DRAINING|DEGRADED --need_reset--> RESETTING --reset_ok--> AVAILABLE
                                                 RESETTING --reset_failed--> OFFLINE
    AVAILABLE|DRAINING --degrade--> DEGRADED --offline--> OFFLINE --online--> AVAILABLE
    any --lost--> OFFLINE;  any --offline_force--> OFFLINE (stops jobs)
"""

from __future__ import annotations

import enum

from gpu_platform.domain.errors import IllegalTransition
from gpu_platform.domain.model.gpu import GpuState

__all__ = [
    "GPU_ILLEGAL",
    "GPU_STATES",
    "GPU_TRANSITIONS",
    "GpuEffect",
    "GpuInput",
    "gpu_transition",
]


class GpuInput(enum.StrEnum):
    DRAIN = "drain"  # operator: let running work finish, place nothing new
    OFFLINE = "offline"  # operator: take an idle GPU out of service
    OFFLINE_FORCE = "offline_force"  # operator: take it out now, stopping its jobs
    ONLINE = "online"  # operator: return it to service
    DEGRADE = "degrade"  # health: unhealthy, not fixable by a reset (check power, support)
    NEED_RESET = "need_reset"  # health: an XID or ECC verdict that a GPU reset clears
    LOST = "lost"  # health: fell off the bus / needs a reboot / row remap failed
    RESET_OK = "reset_ok"  # the reset finished and the GPU answered its health check
    RESET_FAILED = "reset_failed"  # the reset failed or the GPU did not come back


class GpuEffect(enum.Flag):
    NONE = 0
    STOP_JOBS = enum.auto()  # stop (and re-queue or fail) attempts holding this GPU
    RESET = enum.auto()  # reset the GPU once no attempt holds it


#: The states this table governs (ALLOCATED/IN_USE are derived, never stored).
GPU_STATES = (
    GpuState.AVAILABLE,
    GpuState.DRAINING,
    GpuState.DEGRADED,
    GpuState.RESETTING,
    GpuState.OFFLINE,
)

S, In, E = GpuState, GpuInput, GpuEffect
_STOP = E.STOP_JOBS
_RESET = E.STOP_JOBS | E.RESET

GPU_TRANSITIONS: dict[tuple[GpuState, GpuInput], tuple[GpuState, GpuEffect]] = {
    (S.AVAILABLE, In.DRAIN): (S.DRAINING, E.NONE),
    (S.AVAILABLE, In.OFFLINE): (S.OFFLINE, E.NONE),
    (S.AVAILABLE, In.OFFLINE_FORCE): (S.OFFLINE, _STOP),
    (S.AVAILABLE, In.ONLINE): (S.AVAILABLE, E.NONE),
    (S.AVAILABLE, In.DEGRADE): (S.DEGRADED, _STOP),
    (S.AVAILABLE, In.NEED_RESET): (S.RESETTING, _RESET),
    (S.AVAILABLE, In.LOST): (S.OFFLINE, _STOP),
    (S.DRAINING, In.DRAIN): (S.DRAINING, E.NONE),
    (S.DRAINING, In.OFFLINE): (S.OFFLINE, E.NONE),
    (S.DRAINING, In.OFFLINE_FORCE): (S.OFFLINE, _STOP),
    (S.DRAINING, In.ONLINE): (S.AVAILABLE, E.NONE),
    (S.DRAINING, In.DEGRADE): (S.DEGRADED, _STOP),
    (S.DRAINING, In.NEED_RESET): (S.RESETTING, _RESET),
    (S.DRAINING, In.LOST): (S.OFFLINE, _STOP),
    (S.DEGRADED, In.DRAIN): (S.DEGRADED, E.NONE),
    (S.DEGRADED, In.OFFLINE): (S.OFFLINE, E.NONE),
    (S.DEGRADED, In.OFFLINE_FORCE): (S.OFFLINE, _STOP),
    (S.DEGRADED, In.ONLINE): (S.AVAILABLE, E.NONE),
    (S.DEGRADED, In.DEGRADE): (S.DEGRADED, _STOP),
    (S.DEGRADED, In.NEED_RESET): (S.RESETTING, _RESET),
    (S.DEGRADED, In.LOST): (S.OFFLINE, _STOP),
    (S.RESETTING, In.OFFLINE): (S.OFFLINE, E.NONE),
    (S.RESETTING, In.OFFLINE_FORCE): (S.OFFLINE, _STOP),
    (S.RESETTING, In.DEGRADE): (S.RESETTING, _STOP),
    (S.RESETTING, In.NEED_RESET): (S.RESETTING, _STOP),
    (S.RESETTING, In.LOST): (S.OFFLINE, _STOP),
    (S.RESETTING, In.RESET_OK): (S.AVAILABLE, E.NONE),
    (S.RESETTING, In.RESET_FAILED): (S.OFFLINE, E.NONE),
    (S.OFFLINE, In.DRAIN): (S.OFFLINE, E.NONE),
    (S.OFFLINE, In.OFFLINE): (S.OFFLINE, E.NONE),
    (S.OFFLINE, In.OFFLINE_FORCE): (S.OFFLINE, _STOP),
    (S.OFFLINE, In.ONLINE): (S.AVAILABLE, E.NONE),
    (S.OFFLINE, In.DEGRADE): (S.OFFLINE, _STOP),
    (S.OFFLINE, In.NEED_RESET): (S.OFFLINE, _STOP),
    (S.OFFLINE, In.LOST): (S.OFFLINE, _STOP),
    (S.OFFLINE, In.RESET_OK): (S.OFFLINE, E.NONE),  # a late result after an operator's offline
    (S.OFFLINE, In.RESET_FAILED): (S.OFFLINE, E.NONE),
}

#: The pairs that raise, named so that the completeness test pins every decision.
GPU_ILLEGAL = frozenset(
    {
        (S.AVAILABLE, In.RESET_OK),
        (S.AVAILABLE, In.RESET_FAILED),
        (S.DRAINING, In.RESET_OK),
        (S.DRAINING, In.RESET_FAILED),
        (S.DEGRADED, In.RESET_OK),
        (S.DEGRADED, In.RESET_FAILED),
        (S.RESETTING, In.DRAIN),
        (S.RESETTING, In.ONLINE),
    }
)


def gpu_transition(state: GpuState, event: GpuInput) -> tuple[GpuState, GpuEffect]:
    """The next state and effects for `event` in `state`; raises IllegalTransition."""
    try:
        return GPU_TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition("gpu", state, event) from None
