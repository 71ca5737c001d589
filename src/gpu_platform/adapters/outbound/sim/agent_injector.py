"""AgentRoutedInjector: `gpu-platform debug inject` for a replicated cluster.

Each node's faults live in its agent's simulated hardware, so the leader sends a script to the
agent of the node it names (`... node NAME`; lines naming no node mean `default_node`, this
server's own node, as on a single server). One script reaches one agent: a script naming two
nodes is refused, so a refusal never leaves half of a script scheduled.
"""

from __future__ import annotations

from gpu_platform.adapters.outbound.sim.health import script_nodes
from gpu_platform.application.agent_hub import AgentHub

__all__ = ["AgentRoutedInjector"]


class AgentRoutedInjector:
    """Implements FaultInjector over the hub's agent streams (see the module docstring)."""

    def __init__(self, hub: AgentHub, default_node: str) -> None:
        self._hub = hub
        self._default = default_node

    def inject(self, script: str) -> list[str]:
        parts = script_nodes(script, self._default)
        if not parts:
            raise ValueError("empty script")
        if len(parts) > 1:
            names = ", ".join(sorted(parts))
            raise ValueError(f"the script names nodes {names}: inject one node's faults at a time")
        ((node, lines),) = parts.items()
        connected = {name.lower(): name for name in self._hub.connected()}
        return self._hub.inject(connected.get(node.lower(), node), "\n".join(lines))
