"""A fixture mixin for adapters that implement several ports at once."""

from __future__ import annotations

from typing import Any

import pytest


class Made:
    """Every contract fixture is the adapter `make()` builds."""

    def make(self) -> Any:
        raise NotImplementedError

    @pytest.fixture
    def discovery(self) -> Any:
        return self.make()

    @pytest.fixture
    def telemetry(self) -> Any:
        return self.make()

    @pytest.fixture
    def probe(self) -> Any:
        return self.make()

    @pytest.fixture
    def fabric_discovery(self) -> Any:
        return self.make()
