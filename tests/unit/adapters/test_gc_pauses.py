"""`freeze_startup_heap` (issue 21): what is alive when the server starts is not walked by
later garbage collections; what is made afterwards still is."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpu_platform.adapters.outbound.gc_pauses import freeze_startup_heap


class _Thing:
    pass


@pytest.fixture
def frozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the suite collects as before


def test_objects_alive_at_startup_are_frozen_and_later_ones_are_still_collected(
    frozen: None,
) -> None:
    before = _Thing()
    count = freeze_startup_heap()
    # a frozen object another thread lets go of leaves the count: it can only fall
    assert 0 < gc.get_freeze_count() <= count
    after = _Thing()
    tracked = {id(o) for o in gc.get_objects()}
    assert id(before) not in tracked and id(after) in tracked
    cycle = [_Thing()]
    cycle.append(cycle)  # type: ignore[arg-type]
    del cycle
    assert gc.collect() >= 1  # garbage made after the freeze is still found
