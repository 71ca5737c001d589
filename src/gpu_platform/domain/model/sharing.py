"""What a job may ask of a GPU besides whole GPUs: a share, memory, CPUs, a vendor.

A job asks for `gpus` whole GPUs, or for a share of one GPU: `gpu_milli` milli-GPU (1..999;
1000 = the whole GPU) with `gpus == 1`. A share runs under MPS (`sharing="mps"`, NVIDIA only:
the GPU's MPS daemon caps its compute at `gpu_milli / 10` percent of the threads and pins its
device memory) or time-sliced (`"timeslice"`: the GPU is simply shared, nothing is capped).
`gpu_memory_bytes` is, for a share, the device memory it pins (the MPS limit; admission never
lets the pinned memory of one GPU's shares exceed its memory) and, for whole GPUs, the least
memory each GPU must have. `cpu_milli` asks for CPU time in milli-cores per task (enforced by
the CPU quota of the job's cgroup). `vendor` picks NVIDIA, AMD or Intel GPUs.

`parse_gpus` reads the CLI's `--gpus` (`0.25`, `2`) into (gpus, gpu_milli) and `parse_bytes`
reads `10G`; `check_share_fields` refuses bad combinations with the field named.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from gpu_platform.domain.errors import InvalidRequest

__all__ = [
    "MILLI",
    "SHARING_MODES",
    "VENDORS",
    "check_share_fields",
    "effective_sharing",
    "parse_bytes",
    "parse_gpus",
    "pinned_bytes",
]

MILLI = 1000
VENDORS = ("nvidia", "amd", "intel")
SHARING_MODES = ("mps", "timeslice")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_gpus(text: str) -> tuple[int, int]:
    """`--gpus` as (whole GPUs, milli-GPU each): '2' -> (2, 1000), '0.25' -> (1, 250),
    '0' -> (0, 1000). Above 1 only whole GPUs; a share is at least 1 milli-GPU."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise InvalidRequest("gpus", f"{text!r} is not a number") from None
    if not value.is_finite() or value < 0:
        raise InvalidRequest("gpus", f"must be 0, a fraction of one GPU or whole GPUs, not {text}")
    if value == value.to_integral_value():
        return int(value), MILLI
    if value > 1:
        raise InvalidRequest(
            "gpus", f"{text} is more than one GPU with a remainder: above 1, ask for whole GPUs"
        )
    milli = value * MILLI
    if milli != milli.to_integral_value():
        raise InvalidRequest("gpus", f"{text} is finer than a milli-GPU (0.001)")
    return 1, int(milli)


def parse_bytes(text: str, field: str = "gpu_memory") -> int:
    """'10G' -> 10 GiB, '512M', '1.5G', '1024' (binary units; a trailing B or iB is allowed)."""
    m = _BYTES.match(text)
    if m is None:
        raise InvalidRequest(field, f"{text!r} is not a size like 10G, 512M or 1073741824")
    size = int(Decimal(m.group(1)) * _UNITS[m.group(2).upper()])
    if size <= 0:
        raise InvalidRequest(field, f"must be > 0, got {text}")
    return size


def check_share_fields(
    gpus: int,
    gpu_milli: int,
    gpu_memory_bytes: int | None,
    cpu_milli: int,
    vendor: str | None,
    sharing: str | None,
    mig_profile: str | None,
    tasks: int = 1,
) -> None:
    """Refuse (InvalidRequest naming the field) a request that could never mean anything."""
    if not 0 < gpu_milli <= MILLI:
        raise InvalidRequest("gpu_milli", f"must be in 1..{MILLI} milli-GPU, got {gpu_milli}")
    share = gpu_milli < MILLI
    if share and gpus != 1:
        raise InvalidRequest(
            "gpu_milli", f"a share is of one GPU (gpus must be 1, got {gpus}); above 1, whole GPUs"
        )
    if gpu_memory_bytes is not None and gpu_memory_bytes <= 0:
        raise InvalidRequest("gpu_memory_bytes", f"must be > 0, got {gpu_memory_bytes}")
    if gpu_memory_bytes is not None and not gpus:
        raise InvalidRequest("gpu_memory_bytes", "a job without GPUs cannot ask for GPU memory")
    if cpu_milli < 0:
        raise InvalidRequest("cpu_milli", f"must be >= 0, got {cpu_milli}")
    if vendor is not None and vendor not in VENDORS:
        raise InvalidRequest("vendor", f"unknown vendor {vendor!r}: one of {', '.join(VENDORS)}")
    if sharing is not None:
        if sharing not in SHARING_MODES:
            raise InvalidRequest(
                "sharing", f"unknown mode {sharing!r}: one of {', '.join(SHARING_MODES)}"
            )
        if not share:
            raise InvalidRequest("sharing", "only a share of one GPU (gpus below 1) is shared")
        if sharing == "mps" and vendor not in (None, "nvidia"):
            raise InvalidRequest("sharing", f"MPS is NVIDIA's; a {vendor} GPU is time-sliced")
    if share and tasks > 1:
        raise InvalidRequest("tasks", "a gang of shares is not supported: give each task a GPU")
    if share and mig_profile is not None:
        raise InvalidRequest("mig_profile", "a MIG instance is not shared: ask gpus 1 with it")


def effective_sharing(sharing: str | None, vendor: str) -> str:
    """The mode a share runs under on a GPU of `vendor`: as asked, else MPS on NVIDIA and
    time-slicing elsewhere."""
    if sharing is not None:
        return sharing
    return "mps" if vendor == "nvidia" else "timeslice"


def pinned_bytes(gpu_milli: int, gpu_memory_bytes: int | None, capacity: int) -> int:
    """Device memory a share of `gpu_milli` pins on a GPU of `capacity` bytes: what it asked,
    else its fraction of the GPU (so shares that fit in compute also fit in memory)."""
    if gpu_memory_bytes is not None:
        return gpu_memory_bytes
    return capacity * gpu_milli // MILLI
