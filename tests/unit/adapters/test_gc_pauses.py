"""`freeze_startup_heap` (issue 21): what is alive when the server starts is not walked by
later garbage collections; what is made afterwards still is."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpu_platform.adapters.outbound.gc_pauses import CollectionWatch, freeze_startup_heap


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


def test_a_long_full_collection_is_logged_and_a_short_one_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = CollectionWatch(warn_ms=0.0, refreeze_ms=None).start()
    try:
        with caplog.at_level("WARNING", logger="gpu_platform.adapters.outbound.gc_pauses"):
            gc.collect(1)  # not a full one: not timed
            assert watch.full == 0
            gc.collect()
            assert watch.full == 1 and watch.longest_ms > 0
            assert "a full collection took" in caplog.text
            caplog.clear()
            watch.warn_ms = 60_000.0
            gc.collect()
            assert watch.full == 2 and caplog.text == ""
    finally:
        watch.stop()
    gc.collect()
    assert watch.full == 2  # stopped: no longer called


def test_after_a_long_full_collection_what_survived_is_frozen_and_later_garbage_still_found(
    frozen: None,
) -> None:
    survivor = _Thing()
    watch = CollectionWatch(warn_ms=60_000.0, refreeze_ms=0.0).start()
    try:
        gc.collect()
    finally:
        watch.stop()
    assert watch.refreezes == 1
    tracked = {id(o) for o in gc.get_objects()}
    assert id(survivor) not in tracked  # frozen: later collections do not walk it
    cycle = [_Thing()]
    cycle.append(cycle)  # type: ignore[arg-type]
    del cycle
    assert gc.collect() >= 1  # garbage made after the freeze is still found
    quiet = CollectionWatch(warn_ms=60_000.0, refreeze_ms=60_000.0).start()
    try:
        gc.collect()
    finally:
        quiet.stop()
    assert quiet.refreezes == 0  # a short collection freezes nothing
