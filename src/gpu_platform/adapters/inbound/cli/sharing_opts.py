"""`submit`'s sharing options turned into the REST body's fields: `--gpus 0.25` is a share of
one GPU (milli-GPU on the wire), `--gpu-memory 10G`, `--cpus 1.5` (milli-cores on the wire),
`--vendor`, `--sharing`. Raises ValueError ("field: reason") on bad input. The domain rules
are imported when a submit runs, not when the CLI loads (`--help` stays light)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["gpus_text", "share_body", "share_cell", "shared_text"]

MILLI = 1000


def share_body(
    gpus: str,
    gpu_memory: str | None,
    cpus: str | None,
    vendor: str | None,
    sharing: str | None,
) -> dict[str, Any]:
    """The body fields for these options (only those given, besides `gpus`)."""
    if gpus.isascii() and gpus.isdigit() and (gpu_memory, cpus, vendor, sharing) == (None,) * 4:
        return {"gpus": int(gpus)}  # whole GPUs, as parse_gpus reads them, without the domain
    from gpu_platform.domain.errors import InvalidRequest

    try:
        return _body(gpus, gpu_memory, cpus, vendor, sharing)
    except InvalidRequest as exc:
        raise ValueError(str(exc)) from None


def _cpu_milli(text: str) -> int:
    from gpu_platform.domain.errors import InvalidRequest

    try:
        milli = Decimal(text.strip()) * MILLI
    except InvalidOperation:
        raise InvalidRequest("cpus", f"{text!r} is not a number of CPUs") from None
    if not milli.is_finite() or milli <= 0 or milli != milli.to_integral_value():
        raise InvalidRequest("cpus", f"must be > 0 in steps of 0.001 CPU, got {text}")
    return int(milli)


def _body(
    gpus: str,
    gpu_memory: str | None,
    cpus: str | None,
    vendor: str | None,
    sharing: str | None,
) -> dict[str, Any]:
    from gpu_platform.domain.errors import InvalidRequest
    from gpu_platform.domain.model.sharing import SHARING_MODES, VENDORS, parse_bytes, parse_gpus

    whole, milli = parse_gpus(gpus)
    body: dict[str, Any] = {"gpus": whole}
    if milli < MILLI:
        body["gpu_milli"] = milli
    if gpu_memory is not None:
        body["gpu_memory_bytes"] = parse_bytes(gpu_memory, "gpu_memory")
    if cpus is not None:
        body["cpu_milli"] = _cpu_milli(cpus)
    if vendor is not None:
        if vendor not in VENDORS:
            known = ", ".join(VENDORS)
            raise InvalidRequest("vendor", f"unknown vendor {vendor!r}: one of {known}")
        body["vendor"] = vendor
    if sharing is not None:
        if sharing not in SHARING_MODES:
            modes = ", ".join(SHARING_MODES)
            raise InvalidRequest("sharing", f"unknown mode {sharing!r}: one of {modes}")
        body["sharing"] = sharing
    return body


def share_cell(gpu: dict[str, Any]) -> str:
    """The JOB cell of `gpus`: the holder, or each sharer with its share and pinned memory."""
    shares = gpu.get("shares") or []
    if not shares:
        return str(gpu.get("job_id") or "-")
    pinned = sum(s["pinned_memory_bytes"] for s in shares) / (1 << 30)
    each = ",".join(f"{s['job_id']}({s['gpu_milli'] / MILLI:g})" for s in shares)
    return f"{each} [{len(shares)} {shares[0]['sharing']}, {pinned:.0f} GiB pinned]"


def shared_text(status: dict[str, Any]) -> str:
    """`status`'s note on shared GPUs ('' when none)."""
    if not status.get("gpus_shared"):
        return ""
    return f", {status['gpus_shared']} shared by {status['shares']} jobs"


def gpus_text(job: dict[str, Any], detail: bool = False) -> str:
    """A job's GPUs as asked: '2', or a share '0.25'; `detail` adds the mode, GPU memory,
    CPUs and vendor (describe)."""
    milli = int(job.get("gpu_milli") or MILLI)
    text = str(job["gpus"]) if milli >= MILLI else f"{milli / MILLI:g}"
    if not detail:
        return text
    extras = []
    if milli < MILLI and job.get("sharing"):
        extras.append(str(job["sharing"]))
    if job.get("gpu_memory_bytes"):
        extras.append(f"{job['gpu_memory_bytes'] / (1 << 30):g} GiB GPU memory")
    if job.get("cpu_milli"):
        extras.append(f"{job['cpu_milli'] / MILLI:g} CPUs")
    if job.get("vendor"):
        extras.append(str(job["vendor"]))
    return text + (f" ({', '.join(extras)})" if extras else "")
