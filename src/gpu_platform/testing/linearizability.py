"""A linearizability checker: the Wing & Gong / Lowe (WGL) search, per partition, memoized.

Theory of operation
-------------------
A *history* is a sequence of `Operation`s, each an input sent by a client at `call` time and
an output received at `ret` time (times are any comparable numbers: nanoseconds, log line
numbers). Operation `a` *precedes* `b` in real time when `a.ret < b.call`; operations whose
intervals touch or overlap are concurrent. A history is *linearizable* against a sequential
`Model` when there is a total order of its operations that (1) extends real-time precedence
and (2) is accepted by the model when its operations are applied one after another from
`model.init()`, each producing the output that was observed.

Operations with unknown outcome:

* a *pending* operation (`ret is None`: the client crashed, timed out, or got an indeterminate
  error) may have taken effect at any moment after its call, or never. The search may place it
  anywhere after its call, or leave it out; it never precedes anything in real time.
* an unknown output (`output is None`) means "any output": `Model.step` must then accept the
  operation from every state (it still applies the input's effect). A pending operation's
  output is always None.
* an operation known to have failed without effect is not an operation: leave it out.

The search (Lowe, "Testing for linearizability", 2017, after Wing & Gong 1993) walks a
doubly-linked list of call and return events sorted by time. At the head of the list, any call
that comes before the first return may be linearized next: the model steps, and if the step is
accepted the call and its return are lifted out of the list and the search restarts from the
head. Reaching a return event means the operation that returns there cannot wait any longer:
backtrack (pop the last linearized operation, restore the state and the list, try the next
call). Configurations already explored are remembered in a set of (bitset of linearized
operations, model state); a configuration seen before is skipped, which is what makes the
search practical (Lowe's "JIT linearization" with memoization). The search is iterative, with
an explicit stack, so history length is not bounded by Python's recursion limit. It succeeds
when every completed operation is linearized (pending ones may be left out).

One pruning rule on top: an operation the model declares read-only (`Model.is_read_only`: it
changes nothing wherever it is accepted) that can go next and is accepted is the only move
tried from that configuration, because linearizing it at once is never worse than later; and
when the configuration after it is refuted, so is the one before it.

Linearizability is *local* (Herlihy & Wing): a history over independent objects is
linearizable iff each object's sub-history is. `Model.partition` splits a history into such
sub-histories (per key, per job id); each is searched alone, which turns one exponential search
into many small ones. Partitions are searched round-robin, a slice of steps each, so that an
easily refuted partition is found before a hard one is exhausted. When all partitions pass,
their witnesses are merged into one global linearization consistent with real time.

`check(model, history, timeout_s)` returns a `CheckResult`: a `Verdict` (LINEARIZABLE,
NOT_LINEARIZABLE, or UNKNOWN when the time budget ran out), per-partition results and, when
linearizable, the witness order. For a partition found not linearizable, its `linearization` is
the longest prefix the search managed to linearize, for debugging (`linearizability_report.
explain` prints it). Checking stops at the first partition found not linearizable.

Models for a register, a key-value map and the job store live in `linearizability_models`;
parsers for Porcupine's test histories in `linearizability_data`. Errors: `ValueError` for a
malformed operation (a return before its call, a pending operation with an output).
"""

from __future__ import annotations

import enum
import gc
import time
from collections.abc import Generator, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = [
    "CheckResult",
    "Model",
    "Operation",
    "PartitionResult",
    "Verdict",
    "check",
    "is_valid_linearization",
    "single_partition",
]

S = TypeVar("S", bound=Hashable)
In = TypeVar("In")
Out = TypeVar("Out")

_STEPS_PER_SLICE = 4096  # search steps a partition takes before the next one has a turn


@dataclass(frozen=True, slots=True)
class Operation(Generic[In, Out]):
    """One client operation: `input` called at `call`, `output` returned at `ret`.

    `ret is None`: pending or indeterminate (may or may not have happened; never returns).
    `output is None`: outcome unknown; the model must accept any state. `client` is only for
    display. Times are in any unit, compared with `<`; `ret >= call`.
    """

    input: In
    output: Out | None
    call: float
    ret: float | None
    client: int = 0

    def __post_init__(self) -> None:
        if self.ret is not None and self.ret < self.call:
            raise ValueError(f"operation returns ({self.ret}) before its call ({self.call})")
        if self.ret is None and self.output is not None:
            raise ValueError("a pending operation (ret=None) cannot have an observed output")

    @property
    def pending(self) -> bool:
        return self.ret is None


class Model(Protocol[S, In, Out]):
    """A sequential specification. States must be hashable and compare by value (int, str,
    tuples, frozen dataclasses): `==` and `hash` of states are the memo cache's keys, so two
    states that compare equal must behave identically from then on."""

    def init(self) -> S:
        """The state before any operation."""
        ...

    def step(self, state: S, input: In, output: Out | None) -> tuple[bool, S]:
        """Apply `input` to `state`: (whether `output` is what the specification allows, the
        new state). With `output is None` (unknown) the first element must be True."""
        ...

    def is_read_only(self, input: In, output: Out | None) -> bool:
        """True only if, in every state where `step` accepts (input, output), it leaves the
        state unchanged (a read; a cas observed to fail). The search then never backtracks
        over such an operation to try it later (linearizing it at once is never worse).
        False is always safe, only slower."""
        ...

    def partition(self, history: Sequence[Operation[In, Out]]) -> Sequence[Sequence[int]]:
        """Indices into `history`, grouped into independent sub-histories (each index exactly
        once). `single_partition` when the model has one object."""
        ...


def single_partition(history: Sequence[object]) -> list[list[int]]:
    """The partition of a single-object model: the whole history."""
    return [list(range(len(history)))]


class Verdict(enum.Enum):
    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not-linearizable"
    UNKNOWN = "unknown"  # the time budget ran out first


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """The search of one partition. `operations`: its history indices. `linearization`:
    history indices in linearization order — the witness when LINEARIZABLE (pending operations
    it leaves out did not happen), the longest linearizable prefix found so far otherwise.
    `explored`: configurations memoized (a measure of search effort)."""

    verdict: Verdict
    operations: tuple[int, ...]
    linearization: tuple[int, ...]
    explored: int


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The verdict on a whole history. `partitions` holds the finished searches in partition
    order (all of them unless NOT_LINEARIZABLE: searches still running when one partition is
    refuted are abandoned and left out). `linearization` is a global witness (history indices,
    real-time consistent) when LINEARIZABLE, else None."""

    verdict: Verdict
    partitions: tuple[PartitionResult, ...]
    linearization: tuple[int, ...] | None

    @property
    def failed_partition(self) -> PartitionResult | None:
        """The partition that was found not linearizable, if any."""
        for p in self.partitions:
            if p.verdict is Verdict.NOT_LINEARIZABLE:
                return p
        return None


def check(
    model: Model[S, In, Out],
    history: Sequence[Operation[In, Out]],
    timeout_s: float | None = None,
) -> CheckResult:
    """Is `history` linearizable with respect to `model`? UNKNOWN if `timeout_s` (wall-clock
    seconds for the whole check) runs out first; None means no limit."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    parts = [tuple(p) for p in model.partition(history)]
    seen = sorted(i for p in parts for i in p)
    if seen != list(range(len(history))):
        raise ValueError("Model.partition must return every history index exactly once")
    # The partitions are searched round-robin, a slice of steps at a time, so that one that
    # is quick to refute is found before a hard one is exhausted (Porcupine runs them in
    # parallel for the same reason). The cyclic garbage collector is paused meanwhile: the
    # search allocates millions of small objects that it would rescan again and again.
    searches = {n: _search(model, history, part) for n, part in enumerate(parts)}
    done: dict[int, PartitionResult] = {}
    verdict = Verdict.LINEARIZABLE
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while searches and verdict is Verdict.LINEARIZABLE:
            for n, search in list(searches.items()):
                try:
                    next(search)
                except StopIteration as stop:
                    del searches[n]
                    done[n] = stop.value
                    if stop.value.verdict is Verdict.NOT_LINEARIZABLE:
                        verdict = Verdict.NOT_LINEARIZABLE
                        break
            if deadline is not None and searches and time.monotonic() > deadline:
                verdict = Verdict.UNKNOWN
    finally:
        if gc_was_enabled:
            gc.enable()
    if verdict is Verdict.UNKNOWN:
        for n, search in searches.items():
            unknown = search.send(True)  # ask for its best-so-far result
            assert unknown is not None
            done[n] = unknown
    results = tuple(done[n] for n in sorted(done))
    witness = None
    if verdict is Verdict.LINEARIZABLE:
        witness = _merge(history, [r.linearization for r in results])
    return CheckResult(verdict, results, witness)


def _search(  # noqa: PLR0915 - the hot loop is inlined on purpose (CPython call costs)
    model: Model[S, In, Out],
    history: Sequence[Operation[In, Out]],
    part: tuple[int, ...],
) -> Generator[PartitionResult | None, bool | None, PartitionResult]:
    """WGL over the operations `part` of `history`, as a coroutine: it yields None every
    `_STEPS_PER_SLICE` steps; sent True at a yield, it yields its UNKNOWN result instead.
    Its final result is the StopIteration value."""
    ops = [history[i] for i in part]
    n = len(ops)
    # Events sorted by time, calls before returns at equal times (touching = concurrent).
    events: list[tuple[float, int, int]] = []
    for k, op in enumerate(ops):
        events.append((op.call, 0, k))
        if op.ret is not None:
            events.append((op.ret, 1, k))
    events.sort()
    m = len(events)
    # Doubly-linked list over entries 1..m; 0 is the head sentinel, m + 1 the tail sentinel.
    nxt = [*range(1, m + 2), 0]
    prv = [0, *range(0, m + 1)]
    op_of = [0] * (m + 2)
    is_call = [False] * (m + 2)
    ret_entry = [0] * (m + 2)  # call entry -> its return entry, 0 when pending
    call_entry = [0] * n
    for e, (_, kind, k) in enumerate(events, start=1):
        op_of[e] = k
        if kind == 0:
            is_call[e] = True
            call_entry[k] = e
        else:
            ret_entry[call_entry[k]] = e
    inputs = [op.input for op in ops]
    outputs = [op.output for op in ops]
    read_only = [model.is_read_only(op.input, op.output) for op in ops]
    step = model.step

    state = model.init()
    linearized = 0  # bitset over local operation indices
    remaining = sum(1 for op in ops if op.ret is not None)  # completed, not yet linearized
    stack: list[tuple[int, S]] = []  # (call entry, state before it)
    # The memo cache holds one int per configuration: (state number << n) | linearized bitset,
    # where equal states share one number. Storing (bitset, state) pairs instead would keep a
    # copy of a state per configuration (kv states are strings of ~1 kB).
    cache: set[int] = set()
    state_number: dict[S, int] = {}
    best: list[int] = []
    entry = nxt[0]
    # Each configuration is scanned twice: first for a read-only operation the model accepts
    # (taking it is never worse than anything else, so it is the only move tried), then, if
    # there is none, for every other operation that can go next.
    reads_first = True
    steps = 0
    while remaining:
        steps += 1
        if steps == _STEPS_PER_SLICE:
            steps = 0
            if (yield None) is True:
                yield PartitionResult(Verdict.UNKNOWN, part, _to_history(part, best), len(cache))
        if is_call[entry]:
            k = op_of[entry]
            if read_only[k] is not reads_first:  # not this scan's kind
                entry = nxt[entry]
                continue
            ok, new_state = step(state, inputs[k], outputs[k])
            if not ok:
                entry = nxt[entry]
                continue
            new_linearized = linearized | (1 << k)
            number = state_number.get(new_state)
            if number is None:
                number = state_number[new_state] = len(state_number)
            key = (number << n) | new_linearized
            if key not in cache:
                cache.add(key)
                stack.append((entry, state))
                state = new_state
                linearized = new_linearized
                # lift the call and its return out of the list
                nxt[prv[entry]] = nxt[entry]
                prv[nxt[entry]] = prv[entry]
                r = ret_entry[entry]
                if r:
                    remaining -= 1
                    nxt[prv[r]] = nxt[r]
                    prv[nxt[r]] = prv[r]
                if len(stack) > len(best):
                    best = [op_of[e] for e, _ in stack]
                entry = nxt[0]
                reads_first = True
                continue
            if not reads_first:
                entry = nxt[entry]
                continue
            # An accepted read-only operation leads to a refuted configuration, so this
            # configuration is refuted too (`Model.is_read_only`): backtrack.
        elif reads_first:  # no read-only operation can go next: try the others
            reads_first = False
            entry = nxt[0]
            continue
        # A return event (its operation cannot be put off further) or a refuted configuration:
        # backtrack; past a read-only operation, keep backtracking (its parent is refuted).
        while True:
            if not stack:
                return PartitionResult(
                    Verdict.NOT_LINEARIZABLE, part, _to_history(part, best), len(cache)
                )
            entry, state = stack.pop()
            linearized &= ~(1 << op_of[entry])
            r = ret_entry[entry]
            if r:  # unlift in reverse order of lifting
                remaining += 1
                nxt[prv[r]] = r
                prv[nxt[r]] = r
            nxt[prv[entry]] = entry
            prv[nxt[entry]] = entry
            if not read_only[op_of[entry]]:
                break
        entry = nxt[entry]
        reads_first = False
    witness = [op_of[e] for e, _ in stack]
    return PartitionResult(Verdict.LINEARIZABLE, part, _to_history(part, witness), len(cache))


def _to_history(part: tuple[int, ...], local: list[int]) -> tuple[int, ...]:
    return tuple(part[k] for k in local)


def _merge(history: Sequence[Operation[In, Out]], orders: list[tuple[int, ...]]) -> tuple[int, ...]:
    """One real-time-consistent total order containing each partition's order (locality)."""
    inf = float("inf")
    # suffix minimum of return times along each order: the earliest return still to come
    sufmin: list[list[float]] = []
    for order in orders:
        mins = [inf] * (len(order) + 1)
        for at in range(len(order) - 1, -1, -1):
            ret = history[order[at]].ret
            mins[at] = min(mins[at + 1], inf if ret is None else ret)
        sufmin.append(mins)
    pos = [0] * len(orders)
    out: list[int] = []
    total = sum(len(o) for o in orders)
    while len(out) < total:
        for p, order in enumerate(orders):
            if pos[p] == len(order):
                continue
            head = history[order[pos[p]]]
            # no unplaced operation of another partition returns before head's call
            if all(q == p or sufmin[q][pos[q]] >= head.call for q in range(len(orders))):
                out.append(order[pos[p]])
                pos[p] += 1
                break
        else:  # pragma: no cover - impossible when every order is a linearization
            raise AssertionError("partition witnesses cannot be merged")
    return tuple(out)


def is_valid_linearization(
    model: Model[S, In, Out], history: Sequence[Operation[In, Out]], order: Sequence[int]
) -> bool:
    """Does `order` (history indices) witness linearizability: every completed operation once,
    pending ones at most once, real-time precedence kept, and every step accepted by `model`
    when each partition's operations are replayed in this order from `model.init()`?"""
    placed = set(order)
    if len(placed) != len(order) or any(not 0 <= i < len(history) for i in order):
        return False
    if any(op.ret is not None and i not in placed for i, op in enumerate(history)):
        return False
    # no operation placed later may have returned before an earlier one was called
    earliest_later_ret = float("inf")
    for i in reversed(order):
        if earliest_later_ret < history[i].call:
            return False
        ret = history[i].ret
        if ret is not None:
            earliest_later_ret = min(earliest_later_ret, ret)
    for part in model.partition(history):  # each partition replays from its own init()
        members = set(part)
        state = model.init()
        for i in order:
            if i in members:
                ok, state = model.step(state, history[i].input, history[i].output)
                if not ok:
                    return False
    return True
