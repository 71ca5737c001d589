"""Shared fixtures."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.node import Inventory


@pytest.fixture
def inventory() -> Inventory:
    """The embedded default: one 8-GPU node, GPUs 0-3 on NUMA 0 and 4-7 on NUMA 1."""
    return Inventory((default_node(),), source="sim", simulated=True)
