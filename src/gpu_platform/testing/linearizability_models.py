"""Sequential models for `linearizability.check`: a register, a key-value map, the job store.

Register (`RegisterModel`) — one integer register that starts unset (None), as in Jepsen's
etcd tests and Porcupine's `etcdModel`:

* `read()` returns the current value (None when unset);
* `write(v)` sets it;
* `cas(expected, new)` sets it to `new` iff it holds `expected`, and reports whether it did.
  A cas that reports `ok=False` is an observation ("the value was not `expected`"), not a
  no-op: Jepsen's etcd client logs a failed compare as `:fail`, and Porcupine reads it so.
  With an unknown output (indeterminate cas) the swap happens iff the value matched.

Key-value map (`KvModel`) — Porcupine's `kvModel`: string keys, string values, a missing key
reads as "". `get(k)` returns the value, `put(k, v)` replaces it, `append(k, v)` concatenates.
Keys are independent, so the history is partitioned per key and the state is one key's value.

Job store (`JobStoreModel`) — what a client of our job API may observe, per job id (partitioned
per job id; a job's state is a `JobState`, or None while the id is unknown):

=========  ==================================  =====================================
operation  accepted when the job is            then it becomes
=========  ==================================  =====================================
submit     unknown (None)                      QUEUED
retry      always (the same idempotency key)   QUEUED if unknown, else unchanged
start      QUEUED                              RUNNING
finish     RUNNING                             the outcome: COMPLETED or FAILED
cancel     QUEUED or RUNNING (non-terminal)    CANCELLED
get        always; returns the state (or None) unchanged
=========  ==================================  =====================================

A get that was answered 404 is an observation too: `JobOutput(state=None)`, "absent", refused
once the job exists (an acknowledged job that vanished). A get may say how many jobs carry the
key (`copies`, from a listing by client token): anything but 0 for an absent job or 1 for a
present one is refused in every state (one intended submission became two jobs). A job whose
input says `runs=True` moves by itself (the server schedules, runs, re-queues and finishes it
between client operations): its get accepts any state reachable by `RUNS_ON_ITS_OWN` and moves
there — a finished job never runs again, never changes outcome, never vanishes. A submit of
unknown outcome (timeout, connection lost) is a pending operation like any other: it may have
created the job or not, and only later reads decide.

A mutating operation's output says whether it was accepted (`JobOutput(accepted=...)`); one
that was refused changed nothing. Every (state, operation) pair missing from `JOB_TRANSITIONS`
is a refusal. To model more of DESIGN §4 (SCHEDULED, PREEMPTED, requeue), add a `JobOp` and its
rows to `JOB_TRANSITIONS`; `step` needs no change.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_platform.domain.model.job import JobState
from gpu_platform.testing.linearizability import Operation, single_partition

__all__ = [
    "JOB_TRANSITIONS",
    "RUNS_ON_ITS_OWN",
    "JobInput",
    "JobOp",
    "JobOutput",
    "JobStoreModel",
    "KvInput",
    "KvModel",
    "KvOp",
    "KvOutput",
    "RegisterInput",
    "RegisterModel",
    "RegisterOp",
    "RegisterOutput",
]


# ---------------------------------------------------------------------------------- register
class RegisterOp(enum.Enum):
    READ = "read"
    WRITE = "write"
    CAS = "cas"


@dataclass(frozen=True, slots=True)
class RegisterInput:
    """`value`: what write stores or cas swaps in; `expected`: what cas compares against."""

    op: RegisterOp
    value: int | None = None
    expected: int | None = None

    @staticmethod
    def read() -> RegisterInput:
        return RegisterInput(RegisterOp.READ)

    @staticmethod
    def write(value: int) -> RegisterInput:
        return RegisterInput(RegisterOp.WRITE, value)

    @staticmethod
    def cas(expected: int, new: int) -> RegisterInput:
        return RegisterInput(RegisterOp.CAS, new, expected)


@dataclass(frozen=True, slots=True)
class RegisterOutput:
    """`value`: what a read saw (None = unset); `ok`: whether a cas swapped."""

    value: int | None = None
    ok: bool = True


_READ, _WRITE, _CAS = RegisterOp.READ, RegisterOp.WRITE, RegisterOp.CAS


class RegisterModel:
    """One register with read / write / cas; state = its value, None when unset."""

    def init(self) -> int | None:
        return None

    def step(
        self, state: int | None, input: RegisterInput, output: RegisterOutput | None
    ) -> tuple[bool, int | None]:
        op = input.op
        if op is _READ:
            return output is None or output.value == state, state
        if op is _WRITE:
            return True, input.value
        swapped = state == input.expected
        return output is None or output.ok == swapped, input.value if swapped else state

    def is_read_only(self, input: RegisterInput, output: RegisterOutput | None) -> bool:
        # a cas observed to fail is accepted only where it changes nothing
        return input.op is _READ or (input.op is _CAS and output is not None and not output.ok)

    def partition(
        self, history: Sequence[Operation[RegisterInput, RegisterOutput]]
    ) -> list[list[int]]:
        return single_partition(history)


# ---------------------------------------------------------------------------------- kv map
class KvOp(enum.Enum):
    GET = "get"
    PUT = "put"
    APPEND = "append"


@dataclass(frozen=True, slots=True)
class KvInput:
    op: KvOp
    key: str
    value: str = ""


@dataclass(frozen=True, slots=True)
class KvOutput:
    """`value`: what a get returned ("" for a missing key); unused for put and append."""

    value: str = ""


class KvModel:
    """Porcupine's key-value model, partitioned per key; state = the key's value."""

    def init(self) -> str:
        return ""

    def step(self, state: str, input: KvInput, output: KvOutput | None) -> tuple[bool, str]:
        op = input.op
        if op is KvOp.GET:
            return output is None or output.value == state, state
        if op is KvOp.PUT:
            return True, input.value
        return True, state + input.value

    def is_read_only(self, input: KvInput, output: KvOutput | None) -> bool:
        return input.op is KvOp.GET

    def partition(self, history: Sequence[Operation[KvInput, KvOutput]]) -> list[list[int]]:
        groups: dict[str, list[int]] = {}
        for i, op in enumerate(history):
            groups.setdefault(op.input.key, []).append(i)
        return list(groups.values())


# ---------------------------------------------------------------------------------- job store
class JobOp(enum.Enum):
    SUBMIT = "submit"
    START = "start"
    FINISH = "finish"
    CANCEL = "cancel"
    GET = "get"
    RETRY = "retry"  # a submit sent again under the same idempotency key


_OUTCOMES = frozenset({JobState.COMPLETED, JobState.FAILED})

JOB_TRANSITIONS: dict[tuple[JobState | None, JobOp, JobState | None], JobState] = {
    (None, JobOp.SUBMIT, None): JobState.QUEUED,
    (JobState.QUEUED, JobOp.START, None): JobState.RUNNING,
    (JobState.RUNNING, JobOp.FINISH, JobState.COMPLETED): JobState.COMPLETED,
    (JobState.RUNNING, JobOp.FINISH, JobState.FAILED): JobState.FAILED,
    (JobState.QUEUED, JobOp.CANCEL, None): JobState.CANCELLED,
    (JobState.RUNNING, JobOp.CANCEL, None): JobState.CANCELLED,
}
"""(state, operation, outcome argument) -> new state for every accepted mutation."""


@dataclass(frozen=True, slots=True)
class JobInput:
    """`outcome`: COMPLETED or FAILED for finish, None for every other operation."""

    op: JobOp
    job_id: str
    outcome: JobState | None = None
    runs: bool = False  # the server moves the job by itself (RUNS_ON_ITS_OWN)

    def __post_init__(self) -> None:
        if (self.op is JobOp.FINISH) != (self.outcome is not None):
            raise ValueError("finish takes an outcome; no other job operation does")
        if self.outcome is not None and self.outcome not in _OUTCOMES:
            raise ValueError(f"a job finishes COMPLETED or FAILED, not {self.outcome}")


@dataclass(frozen=True, slots=True)
class JobOutput:
    """`accepted`: whether a mutation took effect; `state`: what a get returned (None = the
    job id is unknown: a 404); `copies`: how many jobs a get found for the key (None = not
    counted)."""

    accepted: bool = True
    state: JobState | None = None
    copies: int | None = None


_ACTIVE = frozenset(
    {JobState.PENDING, JobState.QUEUED, JobState.SCHEDULED, JobState.RUNNING, JobState.PREEMPTED}
)
RUNS_ON_ITS_OWN: dict[JobState, frozenset[JobState]] = {
    **{s: _ACTIVE | _OUTCOMES for s in _ACTIVE},  # scheduled, run, re-queued, finished
    **{s: frozenset({s}) for s in (*_OUTCOMES, JobState.CANCELLED)},  # terminal stays
}
"""State -> the states a job with `runs=True` may reach with no client operation (itself
included); only a client's cancel makes CANCELLED."""


class JobStoreModel:
    """The job store seen by its clients, partitioned per job id; state = the job's state."""

    def init(self) -> JobState | None:
        return None

    def step(
        self, state: JobState | None, input: JobInput, output: JobOutput | None
    ) -> tuple[bool, JobState | None]:
        if input.op is JobOp.GET:
            if output is None:
                return True, state
            if output.copies is not None and output.copies != int(output.state is not None):
                return False, state  # two jobs for one key, or a count that contradicts
            if input.runs and state is not None and output.state is not None:
                return output.state in RUNS_ON_ITS_OWN[state], output.state
            return output.state == state, state
        if input.op is JobOp.RETRY:  # idempotent: creates the job at most once
            return output is None or output.accepted, JobState.QUEUED if state is None else state
        new = JOB_TRANSITIONS.get((state, input.op, input.outcome))
        accepted = new is not None
        ok = output is None or output.accepted == accepted
        return ok, new if new is not None else state

    def is_read_only(self, input: JobInput, output: JobOutput | None) -> bool:
        # a refused mutation is accepted only where it changes nothing; a running job's get
        # moves the state
        if input.op is JobOp.GET:
            return not input.runs
        return output is not None and not output.accepted

    def partition(self, history: Sequence[Operation[JobInput, JobOutput]]) -> list[list[int]]:
        groups: dict[str, list[int]] = {}
        for i, op in enumerate(history):
            groups.setdefault(op.input.job_id, []).append(i)
        return list(groups.values())
