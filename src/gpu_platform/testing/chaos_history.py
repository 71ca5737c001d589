"""Histories as Jepsen records them: every operation's invocation and its completion.

`HistoryRecorder` is what client threads write to: `invoke(client, input)` before the request
(the call time) and then exactly one of

* `ok(handle, output)` — it happened, with this output (a 404 read is an `ok` read that says
  "absent");
* `info(handle)` — indeterminate (timeout, connection lost, 5xx): it may or may not have
  happened. It becomes a pending `Operation` (`ret=None`), which the checker may place anywhere
  after its call or leave out (Knossos and Porcupine read Jepsen's `:info` the same way);
* `fail(handle)` — known not to have happened (a 4xx refusal): kept in the saved file, left
  out of the checked history.

An invocation never completed (the client thread was stopped) is indeterminate too.
`history()` is what `linearizability.check` takes; `to_json()` is every record, for the file
`run_chaos.py` saves beside `bench/chaos.json`. Times are `time.monotonic()` seconds.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import threading
import time
from pathlib import Path
from typing import Any, Generic, TypeVar

from gpu_platform.testing.linearizability import CheckResult, Operation

__all__ = ["HistoryRecorder", "operations_to_json", "save_history", "to_plain"]

In = TypeVar("In")
Out = TypeVar("Out")


@dataclasses.dataclass(slots=True)
class _Record(Generic[In, Out]):
    client: int
    input: In
    call: float
    type: str = "invoke"  # invoke (still open) | ok | info | fail
    output: Out | None = None
    ret: float | None = None


class HistoryRecorder(Generic[In, Out]):
    """Thread-safe. Handles are indices into the records, in invocation order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[_Record[In, Out]] = []

    def invoke(self, client: int, input: In) -> int:
        with self._lock:
            self._records.append(_Record(client, input, time.monotonic()))
            return len(self._records) - 1

    def _complete(self, handle: int, kind: str, output: Out | None) -> None:
        now = time.monotonic()
        with self._lock:
            r = self._records[handle]
            if r.type != "invoke":
                raise ValueError(f"operation {handle} already completed ({r.type})")
            r.type, r.output = kind, output
            r.ret = now if kind != "info" else None

    def ok(self, handle: int, output: Out) -> None:
        self._complete(handle, "ok", output)

    def info(self, handle: int) -> None:
        self._complete(handle, "info", None)

    def fail(self, handle: int) -> None:
        self._complete(handle, "fail", None)

    def counts(self) -> dict[str, int]:
        out = {"invoke": 0, "ok": 0, "info": 0, "fail": 0}
        with self._lock:
            for r in self._records:
                out[r.type] += 1
        return out

    def history(self) -> list[Operation[In, Out]]:
        """Completed operations plus indeterminate ones (info or never completed) as pending;
        failed ones are left out."""
        with self._lock:
            records = list(self._records)
        ops: list[Operation[In, Out]] = []
        for r in records:
            if r.type == "ok":
                ops.append(Operation(r.input, r.output, r.call, r.ret, r.client))
            elif r.type in ("info", "invoke"):
                ops.append(Operation(r.input, None, r.call, None, r.client))
        return ops

    def to_json(self) -> list[dict[str, Any]]:
        """Every record: client, type (ok, info, fail; invoke when never completed), input,
        output, call and ret (monotonic seconds)."""
        with self._lock:
            records = list(self._records)
        return [
            {
                "client": r.client,
                "type": r.type,
                "input": to_plain(r.input),
                "output": to_plain(r.output),
                "call": round(r.call, 6),
                "ret": None if r.ret is None else round(r.ret, 6),
            }
            for r in records
        ]


def to_plain(value: Any) -> Any:
    """Dataclasses and enums as JSON values (an enum by its value)."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def save_history(
    path: Path,
    *,
    model: str,
    records: list[dict[str, Any]],
    result: CheckResult,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write one history with its verdict: `{"model", "verdict", "operations": [...]}`, one
    operation a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps({"model": model, "verdict": result.verdict.value, **(extra or {})})
    ops = ",\n".join(json.dumps(r, separators=(",", ":")) for r in records)
    path.write_text(f'{head[:-1]}, "operations": [\n{ops}\n]}}\n')


def operations_to_json(ops: list[Operation[Any, Any]]) -> list[dict[str, Any]]:
    """An already built history (no failed records) in `HistoryRecorder.to_json`'s shape."""
    return [
        {
            "client": op.client,
            "type": "info" if op.ret is None else "ok",
            "input": to_plain(op.input),
            "output": to_plain(op.output),
            "call": round(op.call, 6),
            "ret": None if op.ret is None else round(op.ret, 6),
        }
        for op in ops
    ]
