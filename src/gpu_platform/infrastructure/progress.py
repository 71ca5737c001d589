"""A progress bar for long CLI runs (rich.progress on standard error).

`progress_bar(total, what, enabled=...)` yields `advance(label)`, to call once per finished
unit of work (from the thread that owns the bar, e.g. as futures complete). The bar is drawn
only when enabled and standard error is a terminal; otherwise `advance` does nothing, so
pipes, logs and `--quiet` stay clean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["progress_bar"]


@contextmanager
def progress_bar(
    total: int, what: str, *, enabled: bool = True, console: Console | None = None
) -> Iterator[Callable[[str], None]]:
    """`advance(label)` moves the bar one step and shows `label` (the unit just finished)."""
    console = console if console is not None else Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda _label: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(what, total=total, last="")

        def advance(label: str) -> None:
            progress.update(task, advance=1, last=label)

        yield advance
