"""Job arrays: one submit, N ordinary jobs told apart by a task index (Slurm's `--array`).

An array spec is Slurm's text: comma-separated items, each an index `7`, a range `0-999` or a
stepped range `0-15:4`, then optionally `%N`, the throttle: at most N tasks of the array hold
resources (bound or running) at once. `parse_array` reads it into an `ArraySpec` (indices sorted,
without repeats); `format_array` writes the shortest text of the same set, so
`parse_array(format_array(a)) == a`.

Each task is a normal job with id `<array id>_<index>` (Slurm's form) and an `ArrayTask` saying
which array and index it is; `array_env` is what its processes see (`ARRAY_TASK_ID`,
`SLURM_ARRAY_TASK_ID`, ...).

Errors: `InvalidRequest` naming the field `array` (the APIs answer 422 / INVALID_ARGUMENT).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from itertools import pairwise

from gpu_platform.domain.errors import InvalidRequest

__all__ = [
    "ARRAY_INDEX_CEILING",
    "MAX_ARRAY_SIZE",
    "ArraySpec",
    "ArrayTask",
    "array_env",
    "format_array",
    "parse_array",
    "parse_stored_array",
    "split_task_id",
    "task_id",
]

#: Default bound on indices (like Slurm's MaxArraySize): indices are 0..MAX_ARRAY_SIZE-1.
MAX_ARRAY_SIZE = 1_000_000
#: Hard bound for stored records whatever the configured limit was.
ARRAY_INDEX_CEILING = 1 << 31

_ITEM = re.compile(r"^(\d{1,10})(?:-(\d{1,10})(?::(\d{1,10}))?)?$")


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """The task indices of an array (sorted, unique, non-empty, each >= 0) and its throttle:
    at most `throttle` tasks bound or running at once (0 = no limit). `text` is its shortest
    spelling (`format_array`), computed once: every task of an array shares the spec."""

    indices: tuple[int, ...]
    throttle: int = 0
    text: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.indices:
            raise ValueError("an array has at least one task")
        if self.indices[0] < 0 or any(a >= b for a, b in pairwise(self.indices)):
            raise ValueError("array indices must be >= 0, sorted and unique")
        if self.throttle < 0:
            raise ValueError("throttle must be >= 0")
        object.__setattr__(self, "text", _format(self.indices, self.throttle))

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def first(self) -> int:
        return self.indices[0]

    @property
    def last(self) -> int:
        return self.indices[-1]


@dataclass(frozen=True, slots=True)
class ArrayTask:
    """Task `index` of array `array_id` (the array's spec is shared by all its tasks)."""

    array_id: str
    index: int
    array: ArraySpec


def task_id(array_id: str, index: int) -> str:
    """The job id of task `index`: `<array id>_<index>`, as Slurm writes it."""
    return f"{array_id}_{index}"


def split_task_id(job_id: str) -> tuple[str, int] | None:
    """(array id, index) if `job_id` has a task id's form, else None."""
    head, sep, tail = job_id.rpartition("_")
    if not sep or not head or not tail.isdigit():
        return None
    return head, int(tail)


def parse_array(text: str, max_size: int = MAX_ARRAY_SIZE) -> ArraySpec:
    """Read Slurm's array syntax (`0-999%64`, `1,3,5`, `0-15:4`); every index must be below
    `max_size`. Raises InvalidRequest("array", ...) saying what is wrong."""
    body, sep, throttle_text = text.strip().partition("%")
    throttle = 0
    if sep:
        if not throttle_text.isdigit() or int(throttle_text) < 1:
            raise InvalidRequest("array", f"throttle %{throttle_text} must be a whole number >= 1")
        throttle = int(throttle_text)
    if not body:
        raise InvalidRequest("array", "no task indices (e.g. 0-999, 1,3,5 or 0-15:4)")
    found: set[int] = set()
    for item in body.split(","):
        match = _ITEM.match(item.strip())
        if match is None:
            raise InvalidRequest(
                "array", f"{item!r} is not an index, a range A-B or a stepped range A-B:S"
            )
        low = int(match[1])
        high = int(match[2]) if match[2] is not None else low
        step = int(match[3]) if match[3] is not None else 1
        if high < low:
            raise InvalidRequest("array", f"range {item} runs backwards")
        if step < 1:
            raise InvalidRequest("array", f"step of {item} must be >= 1")
        if high >= max_size:
            raise InvalidRequest(
                "array", f"index {high} is above the largest allowed ({max_size - 1})"
            )
        found.update(range(low, high + 1, step))
    return ArraySpec(tuple(sorted(found)), throttle)


@functools.lru_cache(maxsize=256)
def parse_stored_array(text: str) -> ArraySpec:
    """`parse_array` for records written earlier (cached: every task of an array shares it)."""
    return parse_array(text, ARRAY_INDEX_CEILING)


def format_array(array: ArraySpec) -> str:
    """The text of `array`: consecutive runs as `A-B`, other arithmetic runs of 3+ indices as
    `A-B:S`, then `%N`."""
    return array.text


def _format(idx: tuple[int, ...], throttle: int) -> str:
    items: list[str] = []
    i, n = 0, len(idx)
    while i < n:
        consecutive = i + 1 < n and idx[i + 1] - idx[i] == 1  # A-B from two on, as Slurm
        if consecutive or (i + 2 < n and idx[i + 1] - idx[i] == idx[i + 2] - idx[i + 1]):
            step = idx[i + 1] - idx[i]
            j = i + 1
            while j + 1 < n and idx[j + 1] - idx[j] == step:
                j += 1
            items.append(f"{idx[i]}-{idx[j]}" + (f":{step}" if step != 1 else ""))
            i = j + 1
        else:
            items.append(str(idx[i]))
            i += 1
    text = ",".join(items)
    return f"{text}%{throttle}" if throttle else text


def array_env(task: ArrayTask) -> tuple[tuple[str, str], ...]:
    """What a task's processes see: ours and Slurm's names for the same facts."""
    array = task.array
    return (
        ("ARRAY_JOB_ID", task.array_id),
        ("ARRAY_TASK_ID", str(task.index)),
        ("SLURM_ARRAY_JOB_ID", task.array_id),
        ("SLURM_ARRAY_TASK_COUNT", str(array.count)),
        ("SLURM_ARRAY_TASK_ID", str(task.index)),
        ("SLURM_ARRAY_TASK_MAX", str(array.last)),
        ("SLURM_ARRAY_TASK_MIN", str(array.first)),
    )
