"""A readable account of a linearizability verdict, for debugging a failed check.

`explain(model, history, result)` replays the failed partition's longest linearizable prefix
(its last `show` operations, each with the state after it) and lists the frontier where the
search got stuck: the operations that could have gone next, each with whether the model
accepts it in the prefix's final state. A refused one there (a read of a value nobody could
have written by then, a second accepted submit) is usually the culprit; an accepted one only
led to a dead end further on.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

from gpu_platform.testing.linearizability import CheckResult, Model, Operation, Verdict

__all__ = ["explain"]

S = TypeVar("S", bound=Hashable)
In = TypeVar("In")
Out = TypeVar("Out")


def _describe(i: int, op: Operation[In, Out]) -> str:
    ret = "pending" if op.ret is None else f"{op.ret:g}"
    output = "unknown" if op.output is None else repr(op.output)
    return f"#{i} client {op.client} [{op.call:g}, {ret}] {op.input!r} -> {output}"


def explain(
    model: Model[S, In, Out],
    history: Sequence[Operation[In, Out]],
    result: CheckResult,
    show: int = 10,
) -> str:
    """Text for `result` (from `check(model, history)`): a one-line summary, plus, when it is
    NOT_LINEARIZABLE, the end of the failed partition's longest prefix and its frontier."""
    if result.verdict is not Verdict.NOT_LINEARIZABLE:
        n = len(result.partitions)
        return f"{result.verdict.value}: {len(history)} operations, {n} partitions searched"
    failed = result.failed_partition
    assert failed is not None
    prefix = failed.linearization
    lines = [
        f"not linearizable: a partition of {len(failed.operations)} operations; the longest "
        f"linearizable prefix found has {len(prefix)}"
    ]
    state = model.init()
    if len(prefix) > show:
        lines.append(f"  ... {len(prefix) - show} earlier operations")
    for at, i in enumerate(prefix):
        _, state = model.step(state, history[i].input, history[i].output)
        if at >= len(prefix) - show:
            lines.append(f"  {_describe(i, history[i])}   => state {state!r}")
    done = set(prefix)
    rest = [i for i in failed.operations if i not in done]
    first_ret = min((r for i in rest if (r := history[i].ret) is not None), default=None)
    lines.append("then none of these could go next and lead to a full linearization:")
    for i in rest:
        op = history[i]
        if first_ret is None or op.call <= first_ret:
            ok, _ = model.step(state, op.input, op.output)
            verdict = "accepted, but leads to a dead end" if ok else "REFUSED by the model"
            lines.append(f"  {_describe(i, op)}   {verdict}")
    return "\n".join(lines)
