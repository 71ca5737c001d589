"""Parsers for Porcupine's test histories (`../shared/linearizability/porcupine-test-data/`).

Both formats are logs of a Jepsen-style test: one line per event, a client (`process`)
invokes an operation, and later the same process logs its completion as `:ok` (it happened,
with this result), `:fail` (it did not happen) or `:info` (indeterminate: it may or may not
have happened). Times are line numbers; an operation's call is its `:invoke` line and its
return its completion line. Parsing follows Porcupine's own test parsers:

* `jepsen/etcd_NNN.log` (`parse_jepsen_etcd`) — a single register, for `RegisterModel`:
  `INFO  jepsen.util - <proc> :invoke :read nil` / `:write V` / `:cas [A B]`; completions
  `:ok :read V|nil`, `:ok :write V`, `:ok|:fail :cas [A B]`, `:fail :read :timed-out`,
  `:info :write|:cas :timed-out`. A `:fail` cas is a compare that failed — an observation the
  model checks (`RegisterOutput(ok=False)`). A `:fail` read did not happen and is dropped.
  `:info` operations are pending forever, as are operations still open at the end of the log.
* `kv/cNN-{ok,bad}.txt` (`parse_porcupine_kv`) — a key-value map, for `KvModel`:
  `{:process P, :type :invoke|:ok|:fail|:info, :f :get|:put|:append, :key "K", :value "V"|nil}`.

A line in neither format raises `ValueError` naming the line, so a changed format cannot be
silently misread. `load_history(path)` picks the parser and model from the file's directory.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_platform.testing.linearizability import Operation, Verdict
from gpu_platform.testing.linearizability_models import (
    KvInput,
    KvModel,
    KvOp,
    KvOutput,
    RegisterInput,
    RegisterModel,
    RegisterOutput,
)

__all__ = [
    "LoadedHistory",
    "load_expected",
    "load_history",
    "parse_jepsen_etcd",
    "parse_porcupine_kv",
]

_JEPSEN = re.compile(
    r"^INFO\s+jepsen\.util\s+-\s+(?P<proc>\d+)\s+:(?P<type>invoke|ok|fail|info)\s+"
    r":(?P<f>read|write|cas)\s+(?P<arg>nil|\d+|\[\d+\s+\d+\]|:timed-out)\s*$"
)
_KV = re.compile(
    r"^\{:process (?P<proc>\d+), :type :(?P<type>invoke|ok|fail|info), :f :(?P<f>get|put|append), "
    r':key "(?P<key>[^"]*)", :value (?:nil|"(?P<value>[^"]*)")\}\s*$'
)


class _Builder:
    """Pairs completions with their process's open invocation; keeps invocation order."""

    def __init__(self) -> None:
        self.slots: list[Operation[Any, Any] | None] = []
        self.open: dict[int, tuple[int, Any, int]] = {}  # proc -> (slot, input, call time)

    def invoke(self, proc: int, input: Any, t: int) -> None:
        if proc in self.open:  # a process that re-invokes gave up on its last operation
            self.info(proc)
        self.open[proc] = (len(self.slots), input, t)
        self.slots.append(None)

    def complete(self, proc: int, output: Any, t: int, line: str) -> Any:
        if proc not in self.open:
            raise ValueError(f"completion without an invocation: {line!r}")
        slot, input, call = self.open.pop(proc)
        self.slots[slot] = Operation(input, output, call, t, proc)
        return input

    def fail(self, proc: int, line: str) -> Any:
        if proc not in self.open:
            raise ValueError(f"completion without an invocation: {line!r}")
        _, input, _ = self.open.pop(proc)
        return input  # the slot stays None: the operation did not happen

    def info(self, proc: int) -> None:
        slot, input, call = self.open.pop(proc)
        self.slots[slot] = Operation(input, None, call, None, proc)

    def history(self) -> list[Operation[Any, Any]]:
        for proc in list(self.open):
            self.info(proc)
        return [op for op in self.slots if op is not None]


def _register_input(f: str, arg: str, line: str) -> RegisterInput:
    if f == "read" and arg == "nil":
        return RegisterInput.read()
    if f == "write" and arg.isdigit():
        return RegisterInput.write(int(arg))
    if f == "cas" and arg.startswith("["):
        expected, new = arg[1:-1].split()
        return RegisterInput.cas(int(expected), int(new))
    raise ValueError(f"unrecognised invocation: {line!r}")


def parse_jepsen_etcd(text: str) -> list[Operation[RegisterInput, RegisterOutput]]:
    """The register history in a Jepsen etcd log (see the module docstring)."""
    b = _Builder()
    for t, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        m = _JEPSEN.match(line)
        if m is None:
            raise ValueError(f"not a Jepsen etcd history line: {line!r}")
        proc, kind, f, arg = int(m["proc"]), m["type"], m["f"], m["arg"]
        if kind == "invoke":
            b.invoke(proc, _register_input(f, arg, line), t)
        elif kind == "info":
            if proc not in b.open:
                raise ValueError(f"completion without an invocation: {line!r}")
            b.info(proc)
        elif f == "read" and kind == "ok":
            b.complete(proc, RegisterOutput(value=None if arg == "nil" else int(arg)), t, line)
        elif f == "read":  # :fail :read — did not happen
            b.fail(proc, line)
        elif f == "write" and kind == "ok":
            if b.complete(proc, RegisterOutput(), t, line) != RegisterInput.write(int(arg)):
                raise ValueError(f"completion does not match its invocation: {line!r}")
        elif f == "cas" and arg.startswith("["):
            got = b.complete(proc, RegisterOutput(ok=kind == "ok"), t, line)
            if got != _register_input(f, arg, line):
                raise ValueError(f"completion does not match its invocation: {line!r}")
        else:
            raise ValueError(f"unrecognised completion: {line!r}")
    return b.history()


def parse_porcupine_kv(text: str) -> list[Operation[KvInput, KvOutput]]:
    """The key-value history in a Porcupine kv log (see the module docstring)."""
    b = _Builder()
    for t, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        m = _KV.match(line)
        if m is None:
            raise ValueError(f"not a Porcupine kv history line: {line!r}")
        proc, kind, f = int(m["proc"]), m["type"], m["f"]
        value = m["value"]
        if kind == "invoke":
            op = KvOp(f)
            if (op is KvOp.GET) != (value is None):
                raise ValueError(f"get takes no value, put and append take one: {line!r}")
            b.invoke(proc, KvInput(op, m["key"], value or ""), t)
        elif kind == "ok":
            output = KvOutput(value or "") if f == "get" else KvOutput()
            got = b.complete(proc, output, t, line)
            if got.op is not KvOp(f) or got.key != m["key"]:
                raise ValueError(f"completion does not match its invocation: {line!r}")
        elif kind == "fail":
            b.fail(proc, line)
        else:
            if proc not in b.open:
                raise ValueError(f"completion without an invocation: {line!r}")
            b.info(proc)
    return b.history()


@dataclass(frozen=True, slots=True)
class LoadedHistory:
    """A parsed history file with the model it is checked against."""

    model: Any
    history: list[Operation[Any, Any]]


def load_history(path: Path) -> LoadedHistory:
    """Parse `path`: a file under `jepsen/` (register) or `kv/` (key-value map)."""
    text = path.read_text()
    if path.parent.name == "jepsen":
        return LoadedHistory(RegisterModel(), list(parse_jepsen_etcd(text)))
    if path.parent.name == "kv":
        return LoadedHistory(KvModel(), list(parse_porcupine_kv(text)))
    raise ValueError(f"{path}: expected a file under jepsen/ or kv/")


def load_expected(path: Path) -> dict[str, Verdict]:
    """EXPECTED.csv: relative file name -> the verdict Porcupine's own tests expect."""
    with path.open(newline="") as f:
        return {row["file"]: Verdict(row["expected"]) for row in csv.DictReader(f)}
