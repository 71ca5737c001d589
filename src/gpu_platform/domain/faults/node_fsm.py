"""The node lifecycle as one transition table.

Theory of operation: a node's state (`Node.state`) moves only by feeding a `NodeInput` to
`node_transition`. Heartbeats keep a node READY; the cluster state machine feeds MISSED when
none arrived for `node_suspect_after_s` (READY → SUSPECT: nothing new is placed there, running
work continues) and TIMEOUT after `node_down_after_s` (→ DOWN: its attempts are stopped and
re-queued by their restart policy). A DOWN node stays DOWN when heartbeats return — a flapping
node must not keep swallowing jobs — until an operator brings it `online`. A DRAINING node
ignores MISSED (it receives no new work anyway) but still goes DOWN on TIMEOUT.

Draining a DOWN node is illegal (IllegalTransition): online it first.

    READY --missed--> SUSPECT --heartbeat--> READY
    READY|SUSPECT|DRAINING --timeout--> DOWN --online--> READY
    READY|SUSPECT --drain--> DRAINING --online--> READY
    any --offline--> DOWN;  any --offline_force--> DOWN (stops jobs)
"""

from __future__ import annotations

import enum

from gpu_platform.domain.errors import IllegalTransition
from gpu_platform.domain.model.node import NodeState

__all__ = ["NODE_ILLEGAL", "NODE_TRANSITIONS", "NodeEffect", "NodeInput", "node_transition"]


class NodeInput(enum.StrEnum):
    HEARTBEAT = "heartbeat"  # the node's agent reported in
    MISSED = "missed"  # no heartbeat for node_suspect_after_s
    TIMEOUT = "timeout"  # no heartbeat for node_down_after_s
    DRAIN = "drain"  # operator
    OFFLINE = "offline"  # operator, node idle
    OFFLINE_FORCE = "offline_force"  # operator, stopping its jobs
    ONLINE = "online"  # operator


class NodeEffect(enum.Flag):
    NONE = 0
    STOP_JOBS = enum.auto()  # stop (and re-queue or fail) every attempt on the node


S, In, E = NodeState, NodeInput, NodeEffect
_STOP = E.STOP_JOBS

NODE_TRANSITIONS: dict[tuple[NodeState, NodeInput], tuple[NodeState, NodeEffect]] = {
    (S.READY, In.HEARTBEAT): (S.READY, E.NONE),
    (S.READY, In.MISSED): (S.SUSPECT, E.NONE),
    (S.READY, In.TIMEOUT): (S.DOWN, _STOP),
    (S.READY, In.DRAIN): (S.DRAINING, E.NONE),
    (S.READY, In.OFFLINE): (S.DOWN, E.NONE),
    (S.READY, In.OFFLINE_FORCE): (S.DOWN, _STOP),
    (S.READY, In.ONLINE): (S.READY, E.NONE),
    (S.DRAINING, In.HEARTBEAT): (S.DRAINING, E.NONE),
    (S.DRAINING, In.MISSED): (S.DRAINING, E.NONE),
    (S.DRAINING, In.TIMEOUT): (S.DOWN, _STOP),
    (S.DRAINING, In.DRAIN): (S.DRAINING, E.NONE),
    (S.DRAINING, In.OFFLINE): (S.DOWN, E.NONE),
    (S.DRAINING, In.OFFLINE_FORCE): (S.DOWN, _STOP),
    (S.DRAINING, In.ONLINE): (S.READY, E.NONE),
    (S.SUSPECT, In.HEARTBEAT): (S.READY, E.NONE),
    (S.SUSPECT, In.MISSED): (S.SUSPECT, E.NONE),
    (S.SUSPECT, In.TIMEOUT): (S.DOWN, _STOP),
    (S.SUSPECT, In.DRAIN): (S.DRAINING, E.NONE),
    (S.SUSPECT, In.OFFLINE): (S.DOWN, E.NONE),
    (S.SUSPECT, In.OFFLINE_FORCE): (S.DOWN, _STOP),
    (S.SUSPECT, In.ONLINE): (S.READY, E.NONE),
    (S.DOWN, In.HEARTBEAT): (S.DOWN, E.NONE),
    (S.DOWN, In.MISSED): (S.DOWN, E.NONE),
    (S.DOWN, In.TIMEOUT): (S.DOWN, _STOP),
    (S.DOWN, In.OFFLINE): (S.DOWN, E.NONE),
    (S.DOWN, In.OFFLINE_FORCE): (S.DOWN, _STOP),
    (S.DOWN, In.ONLINE): (S.READY, E.NONE),
}

#: The pairs that raise, named so that the completeness test pins every decision.
NODE_ILLEGAL = frozenset({(S.DOWN, In.DRAIN)})


def node_transition(state: NodeState, event: NodeInput) -> tuple[NodeState, NodeEffect]:
    """The next state and effects for `event` in `state`; raises IllegalTransition."""
    try:
        return NODE_TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition("node", state, event) from None
