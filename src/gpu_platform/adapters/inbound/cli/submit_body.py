"""`submit`'s options turned into the REST body, without typer or rich: both the typer command
(`cli.submit`) and the fast path (`cli.fast`) build the body here, so they refuse the same
input with the same message. Every refusal is a ValueError whose str() is the CLI's line
(exit 2)."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from gpu_platform.adapters.inbound.cli.sharing_opts import share_body

__all__ = ["Affinity", "parse_duration", "parse_size", "submit_body"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """'4G' -> 4 GiB in bytes; plain numbers are bytes."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = raw[-1:] if raw[-1:] in _UNITS else ""
    number = raw[: len(raw) - len(unit)]
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"--memory {text!r}: expected a size like 512M or 4G") from None
    if value <= 0:
        raise ValueError(f"--memory {text!r}: must be positive")
    return int(value)


def parse_duration(text: str) -> float:
    """'90' -> 90 s; '01:30' -> 90 s; '1:00:00' -> 3600 s."""
    parts = text.strip().split(":")
    try:
        if len(parts) > 3:
            raise ValueError
        seconds = 0.0
        for part in parts:
            seconds = seconds * 60 + float(part)
    except ValueError:
        raise ValueError(f"--time-limit {text!r}: expected SECONDS or [HH:]MM:SS") from None
    fields = [float(p) for p in parts]
    if not all(math.isfinite(f) and f >= 0 for f in fields):
        raise ValueError(f"--time-limit {text!r}: each field must be a finite number >= 0")
    if len(fields) > 1 and any(f >= 60 for f in fields[1:]):
        raise ValueError(f"--time-limit {text!r}: minutes and seconds must be below 60")
    if seconds <= 0:
        raise ValueError(f"--time-limit {text!r}: must be positive")
    return seconds


class Affinity(StrEnum):
    """How hard a placement wish is."""

    none = "none"
    preferred = "preferred"
    required = "required"


def submit_body(
    *,
    command: list[str],
    gpus: str = "0",
    gpu_memory: str | None = None,
    cpus: str | None = None,
    vendor: str | None = None,
    sharing: str | None = None,
    tasks: int = 1,
    name: str = "",
    env: list[str] | None = None,
    priority: int = 0,
    preemptible: bool = True,
    after: list[str] | None = None,
    gpu_model: list[str] | None = None,
    mig: str | None = None,
    nvlink: Affinity = Affinity.preferred,
    numa: Affinity = Affinity.preferred,
    same_rack: Affinity = Affinity.preferred,
    tenant: str | None = None,
    cwd: str | None = None,
    image: str | None = None,
    mount: list[str] | None = None,
    memory: str | None = None,
    time_limit: str | None = None,
    user: str | None = None,
    max_attempts: int = 3,
    retry_backoff: float = 0.0,
) -> dict[str, Any]:
    """The POST /v1/jobs body for `submit`'s options (defaults as the command's)."""
    env_map: dict[str, str] = {}
    for item in env or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env {item!r}: expected KEY=VALUE")
        env_map[key] = value
    shares = share_body(gpus, gpu_memory, cpus, vendor, sharing)
    if mig is not None and shares["gpus"] == 0:
        shares["gpus"] = 1  # a MIG job holds one GPU; any other count is refused by the server
    body: dict[str, Any] = {
        "command": command,
        **shares,
        "tasks": tasks,
        "preemptible": preemptible,
        "depends_on": after or [],
        "gpu_models": gpu_model or [],
        "nvlink": nvlink.value,
        "numa": numa.value,
        "same_rack": same_rack.value,
        "mig_profile": mig,
        "name": name,
        "env": env_map,
        "priority": priority,
        "tenant": tenant,
        "cwd": cwd,
        "user": user,
        "max_attempts": max_attempts,
        "retry_backoff_s": retry_backoff,
    }
    if image is not None or mount:
        body.update(image=image, mounts=mount or [])
    if memory is not None:
        body["memory_bytes"] = parse_size(memory)
    if time_limit is not None:
        body["time_limit_s"] = parse_duration(time_limit)
    return body
