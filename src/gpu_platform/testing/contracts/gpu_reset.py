"""The GpuReset contract."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpu_platform.ports.outbound.gpu_reset import GpuReset, GpuResetError

__all__ = ["GpuResetContract", "ResetKit"]

#: `make(healthy)` returns (the adapter, its node name, a GPU index on that node); with
#: `healthy=False` the next reset of that GPU must fail.
ResetKit = Callable[[bool], tuple[GpuReset, str, int]]


class GpuResetContract:
    """Subclass and provide `reset_kit` (see ResetKit)."""

    @pytest.fixture
    def reset_kit(self) -> ResetKit:
        raise NotImplementedError

    def test_resetting_a_healthy_idle_gpu_returns(self, reset_kit: ResetKit) -> None:
        reset, node, index = reset_kit(True)
        reset.reset(node, index)  # no exception is the whole promise
        reset.reset(node, index)  # and it can be done again

    def test_a_failed_reset_raises_gpu_reset_error_with_a_reason(self, reset_kit: ResetKit) -> None:
        reset, node, index = reset_kit(False)
        with pytest.raises(GpuResetError) as info:
            reset.reset(node, index)
        assert str(info.value)

    def test_a_gpu_the_adapter_does_not_drive_is_a_reset_error(self, reset_kit: ResetKit) -> None:
        reset, _, index = reset_kit(True)
        with pytest.raises(GpuResetError):
            reset.reset("no-such-node", index)
