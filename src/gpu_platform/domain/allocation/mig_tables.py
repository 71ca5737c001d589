"""NVIDIA MIG GPU-instance profile and placement tables (A100-40GB, A100-80GB, H100-80GB).

Placements are `start` offsets in **memory slices** (8 per GPU); `memory_slices` is the
placement size NVML reports (`nvmlGpuInstancePlacement_t.size`). Compute slices (7 per GPU) are
the `<n>g` of the name. Sources: NVIDIA MIG user guide "Supported MIG Profiles" (fractions of
memory and SMs, instance counts), `nvidia-smi mig -lgip/-lgipp` listings and nvidia-ml-py's
`NVML_GPU_INSTANCE_PROFILE_*` indices (see docs/allocation.md for the citations).

H100 3-slice caveat: the go-nvml mock lists H100 3g placements as `{0:3},{4:3}`. NVIDIA's
guide gives every 3g profile (A100 3g.20gb, H100 3g.40gb) a memory fraction of 4/8, and the
name 3g.40gb on an 80 GB board is 4 x 10 GB slices, so size 4 at starts {0, 4} is used here,
as on A100. `memory_mib` figures are informational only (the scheduler reasons in memory
slices): the A100 ones are NVML's `memorySizeMB` as listed by the go-nvml mock and NVIDIA's
docs; the H100 ones are approximate and were not checked against a device.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "A100_40GB",
    "A100_80GB",
    "COMPUTE_SLICES",
    "H100_80GB",
    "MEMORY_SLICES",
    "MIG_MODELS",
    "MigGpuModel",
    "MigProfile",
]

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile.

    `profile_id` is NVML's `info.id` (what `nvidia-smi mig -lgip` prints and Create* takes);
    `nvml_index` is the `NVML_GPU_INSTANCE_PROFILE_*` constant passed to
    `nvmlDeviceGetGpuInstanceProfileInfo`. `starts` are the legal placement starts in memory
    slices, each spanning `memory_slices`.
    """

    name: str
    profile_id: int
    nvml_index: int
    compute_slices: int
    memory_slices: int
    max_instances: int
    starts: tuple[int, ...]
    sm_count: int
    memory_mib: int
    media_extensions: bool = False

    def slices(self, start: int) -> range:
        return range(start, start + self.memory_slices)


@dataclass(frozen=True, slots=True)
class MigGpuModel:
    """A MIG-capable board: its name as NVML reports it and its profiles, largest first."""

    name: str
    profiles: tuple[MigProfile, ...]

    def profile(self, name_or_id: str | int) -> MigProfile:
        for p in self.profiles:
            if name_or_id in (p.name, p.profile_id):
                return p
        raise KeyError(f"{self.name} has no MIG profile {name_or_id!r}")


# NVML_GPU_INSTANCE_PROFILE_* indices.
_IDX_1, _IDX_2, _IDX_3, _IDX_4, _IDX_7 = 0, 1, 2, 3, 4
_IDX_1_REV1, _IDX_1_REV2 = 7, 9
_ALL_1G = (0, 1, 2, 3, 4, 5, 6)


def _model(
    name: str, mem: tuple[int, int, int, int, int, int, int], sms: tuple[int, ...]
) -> MigGpuModel:
    """Build a board's table; `mem` in MiB for 1g, 1g+me, 1g-double, 2g, 3g, 4g, 7g profiles;
    `sms` SM counts for 1g, 2g, 3g, 4g, 7g. The geometry (ids, starts, sizes) is shared."""
    gb = name.rsplit("-", 1)[1].removesuffix("GB")
    unit = int(gb) // MEMORY_SLICES  # GB per memory slice in the marketing names
    sm1, sm2, sm3, sm4, sm7 = sms
    return MigGpuModel(
        name=name,
        profiles=(
            MigProfile(f"7g.{8 * unit}gb", 0, _IDX_7, 7, 8, 1, (0,), sm7, mem[6]),
            MigProfile(f"4g.{4 * unit}gb", 5, _IDX_4, 4, 4, 1, (0,), sm4, mem[5]),
            MigProfile(f"3g.{4 * unit}gb", 9, _IDX_3, 3, 4, 2, (0, 4), sm3, mem[4]),
            MigProfile(f"2g.{2 * unit}gb", 14, _IDX_2, 2, 2, 3, (0, 2, 4), sm2, mem[3]),
            MigProfile(f"1g.{2 * unit}gb", 15, _IDX_1_REV2, 1, 2, 4, (0, 2, 4, 6), sm1, mem[2]),
            MigProfile(f"1g.{unit}gb+me", 20, _IDX_1_REV1, 1, 1, 1, _ALL_1G, sm1, mem[1], True),
            MigProfile(f"1g.{unit}gb", 19, _IDX_1, 1, 1, 7, _ALL_1G, sm1, mem[0]),
        ),
    )


A100_40GB = _model(
    "A100-SXM4-40GB", (4864, 4864, 9856, 9856, 19968, 19968, 40192), (14, 28, 42, 56, 98)
)
A100_80GB = _model(
    "A100-SXM4-80GB", (9728, 9728, 19968, 19968, 40192, 40192, 80896), (14, 28, 42, 56, 98)
)
H100_80GB = _model(
    "H100-SXM5-80GB", (9984, 9984, 20096, 20096, 40320, 40320, 80640), (16, 32, 60, 64, 132)
)

MIG_MODELS: dict[str, MigGpuModel] = {m.name: m for m in (A100_40GB, A100_80GB, H100_80GB)}
