# ruff: noqa: N816  (names mirror nvidia-ml-py's pynvml module)
"""FakeNvmlMig: a stand-in for the `pynvml` module (nvidia-ml-py), MIG calls only.

Pass an instance where the NVML MIG adapter takes its `pynvml` module. It models the MIG
lifecycle the way the driver does: profile info by `NVML_GPU_INSTANCE_PROFILE_*` index with the
real profile ids, possible placements (memory slices), create-with-placement that refuses
overlaps, instance-count and compute-slice limits with NVMLError(INSUFFICIENT_RESOURCES),
compute instances inside GPU instances, destroy that refuses a GPU instance that still has
compute instances (IN_USE), caller-allocated handle arrays, and NotSupported on GPUs whose MIG
mode is off. GPU/compute instance handles are ctypes pointers as in nvidia-ml-py. Every
compute instance is a MIG device: enumerated by index (NOT_FOUND for an empty index) with its
GPU/compute instance ids and a "MIG-<uuid>" UUID that is new for every created instance. This is the
MIG-scoped fake of this issue; the full NVML fake of issue 3 supersedes it when it lands.
"""

from __future__ import annotations

import ctypes
import uuid
from dataclasses import dataclass, field
from typing import Any

from gpu_platform.domain.allocation.mig_tables import COMPUTE_SLICES, MigGpuModel, MigProfile

__all__ = ["FakeNvmlMig", "NVMLError"]


class NVMLError(Exception):
    """Like pynvml.NVMLError: `value` is the NVML_ERROR_* code."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class _OpaqueGi(ctypes.Structure):
    pass


class _OpaqueCi(ctypes.Structure):
    pass


c_nvmlGpuInstance_t = ctypes.POINTER(_OpaqueGi)
c_nvmlComputeInstance_t = ctypes.POINTER(_OpaqueCi)


@dataclass
class _Info:
    id: int
    sliceCount: int = 0
    instanceCount: int = 0
    multiprocessorCount: int = 0
    memorySizeMB: int = 0
    name: str = ""


@dataclass
class _GiInfo:
    id: int
    profileId: int
    placement: c_nvmlGpuInstancePlacement_t
    device: Any = None


@dataclass
class _Gi:
    token: int
    device: int
    gi_id: int
    profile: MigProfile
    start: int
    cis: dict[int, tuple[int, int]] = field(default_factory=dict)  # ci id -> (token, profile)


@dataclass(frozen=True)
class _MigDevice:
    """A MIG device handle: the compute instance `ci_token` of GPU instance `gi_token`."""

    gi_token: int
    ci_token: int


_UUID_NS = uuid.UUID("6f0d3a52-2b1e-4c55-9a57-6b1f1c0de8a1")
_MAX_MIG_DEVICES = 7


def _deref(ref: Any) -> Any:
    """The object behind ctypes.byref(x) (CArgObject._obj) or a pointer, or x itself."""
    if hasattr(ref, "_obj"):
        return ref._obj
    if hasattr(ref, "contents"):
        return ref.contents
    return ref


class FakeNvmlMig:
    """One instance = one machine's NVML. `gpus` are (model, mig_enabled) per device index."""

    NVML_SUCCESS = 0
    NVML_ERROR_UNINITIALIZED = 1
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_IN_USE = 19
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0
    NVML_GPU_INSTANCE_PROFILE_2_SLICE = 1
    NVML_GPU_INSTANCE_PROFILE_3_SLICE = 2
    NVML_GPU_INSTANCE_PROFILE_4_SLICE = 3
    NVML_GPU_INSTANCE_PROFILE_7_SLICE = 4
    NVML_GPU_INSTANCE_PROFILE_8_SLICE = 5
    NVML_GPU_INSTANCE_PROFILE_6_SLICE = 6
    NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 7
    NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 8
    NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 9
    NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
    NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0
    NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 1
    NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 2
    NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 3
    NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 4
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
    NVMLError = NVMLError
    c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t
    c_nvmlGpuInstance_t = c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = c_nvmlComputeInstance_t

    _CI_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}

    def __init__(self, gpus: list[tuple[MigGpuModel, bool]]) -> None:
        self._gpus = list(gpus)
        self._initialised = False
        self._gis: dict[int, _Gi] = {}
        self._ci_owner: dict[int, int] = {}  # ci token -> gi token
        self._next_token = 0x100
        self.calls: list[str] = []

    # -- helpers ------------------------------------------------------------------------------

    def _token(self) -> int:
        self._next_token += 0x10
        return self._next_token

    def _check(self, name: str) -> None:
        self.calls.append(name)
        if not self._initialised:
            raise NVMLError(self.NVML_ERROR_UNINITIALIZED)

    def _dev(self, handle: Any, mig_required: bool = True) -> int:
        index = int(handle)
        if not 0 <= index < len(self._gpus):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        if mig_required and not self._gpus[index][1]:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return index

    def _gi(self, handle: Any) -> _Gi:
        token = ctypes.cast(handle, ctypes.c_void_p).value or 0
        if token not in self._gis:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return self._gis[token]

    def _profile_by_id(self, dev: int, profile_id: int) -> MigProfile:
        for p in self._gpus[dev][0].profiles:
            if p.profile_id == profile_id:
                return p
        raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)

    def _on(self, dev: int) -> list[_Gi]:
        return [g for g in self._gis.values() if g.device == dev]

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        """Test hook (real NVML needs root and a GPU reset)."""
        self._gpus[index] = (self._gpus[index][0], enabled)

    # -- pynvml surface -----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._initialised = True

    def nvmlShutdown(self) -> None:
        self._initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex")
        return self._dev(index, mig_required=False)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._check("nvmlDeviceGetName")
        return f"NVIDIA {self._gpus[self._dev(handle, False)][0].name}"

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._check("nvmlDeviceGetUUID")
        if isinstance(handle, _MigDevice):
            if handle.gi_token not in self._gis:
                raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
            return f"MIG-{uuid.uuid5(_UUID_NS, f'mig/{handle.gi_token}/{handle.ci_token}')}"
        return f"GPU-{uuid.uuid5(_UUID_NS, f'gpu/{self._dev(handle, False)}')}"

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount")
        self._dev(handle, False)
        return _MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> _MigDevice:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex")
        dev = self._dev(handle)
        if not 0 <= index < _MAX_MIG_DEVICES:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        devices = [
            _MigDevice(g.token, token)
            for g in sorted(self._on(dev), key=lambda g: g.gi_id)
            for _ci, (token, _prof) in sorted(g.cis.items())
        ]
        if index >= len(devices):
            raise NVMLError(self.NVML_ERROR_NOT_FOUND)
        return devices[index]

    def _mig_device(self, handle: Any) -> tuple[_Gi, int]:
        if not isinstance(handle, _MigDevice) or handle.gi_token not in self._gis:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        g = self._gis[handle.gi_token]
        ci_id = next((k for k, (t, _) in g.cis.items() if t == handle.ci_token), None)
        if ci_id is None:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return g, ci_id

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        self._check("nvmlDeviceGetGpuInstanceId")
        return self._mig_device(handle)[0].gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        self._check("nvmlDeviceGetComputeInstanceId")
        return self._mig_device(handle)[1]

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        self._check("nvmlDeviceGetMigMode")
        mode = int(self._gpus[self._dev(handle, False)][1])
        return [mode, mode]

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: Any, profile: int, version: int = 2
    ) -> _Info:
        self._check("nvmlDeviceGetGpuInstanceProfileInfo")
        dev = self._dev(handle)
        for p in self._gpus[dev][0].profiles:
            if p.nvml_index == profile:
                return _Info(
                    p.profile_id,
                    p.compute_slices,
                    p.max_instances,
                    p.sm_count,
                    p.memory_mib,
                    f"MIG {p.name}",
                )
        raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: Any, profile_id: int, placements: Any, count: Any
    ) -> int:
        self._check("nvmlDeviceGetGpuInstancePossiblePlacements")
        p = self._profile_by_id(self._dev(handle), profile_id)
        n = _deref(count)
        if placements is None:
            n.value = len(p.starts)
            return 0
        if n.value < len(p.starts):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        for i, s in enumerate(p.starts):
            placements[i].start, placements[i].size = s, p.memory_slices
        n.value = len(p.starts)
        return 0

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profile_id: int, placement: Any
    ) -> Any:
        self._check("nvmlDeviceCreateGpuInstanceWithPlacement")
        dev = self._dev(handle)
        p = self._profile_by_id(dev, profile_id)
        pl = _deref(placement)
        if pl.start not in p.starts or pl.size != p.memory_slices:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        live = self._on(dev)
        want = set(p.slices(pl.start))
        if any(want & set(g.profile.slices(g.start)) for g in live):
            raise NVMLError(self.NVML_ERROR_INSUFFICIENT_RESOURCES)
        same = sum(1 for g in live if g.profile.profile_id == profile_id)
        compute = sum(g.profile.compute_slices for g in live)
        if same >= p.max_instances or compute + p.compute_slices > COMPUTE_SLICES:
            raise NVMLError(self.NVML_ERROR_INSUFFICIENT_RESOURCES)
        used = {g.gi_id for g in live}
        gi_id = next(i for i in range(1, 64) if i not in used)
        token = self._token()
        self._gis[token] = _Gi(token, dev, gi_id, p, pl.start)
        return ctypes.cast(ctypes.c_void_p(token), c_nvmlGpuInstance_t)

    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profile_id: int, instances: Any, count: Any
    ) -> int:
        self._check("nvmlDeviceGetGpuInstances")
        dev = self._dev(handle)
        self._profile_by_id(dev, profile_id)
        found = [g for g in self._on(dev) if g.profile.profile_id == profile_id]
        if len(found) > _deref(count).value:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        for i, g in enumerate(found):
            instances[i] = ctypes.cast(ctypes.c_void_p(g.token), c_nvmlGpuInstance_t)
        _deref(count).value = len(found)
        return 0

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int) -> Any:
        self._check("nvmlDeviceGetGpuInstanceById")
        dev = self._dev(handle)
        for g in self._on(dev):
            if g.gi_id == gi_id:
                return ctypes.cast(ctypes.c_void_p(g.token), c_nvmlGpuInstance_t)
        raise NVMLError(self.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, gi: Any) -> _GiInfo:
        self._check("nvmlGpuInstanceGetInfo")
        g = self._gi(gi)
        placement = c_nvmlGpuInstancePlacement_t(g.start, g.profile.memory_slices)
        return _GiInfo(g.gi_id, g.profile.profile_id, placement, g.device)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: Any, profile: int, eng_profile: int, version: int = 2
    ) -> _Info:
        self._check("nvmlGpuInstanceGetComputeInstanceProfileInfo")
        g = self._gi(gi)
        slices = {v: k for k, v in self._CI_INDEX.items()}.get(profile)
        if slices is None or slices > g.profile.compute_slices or eng_profile != 0:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return _Info(profile, slices, g.profile.compute_slices // slices)

    def nvmlGpuInstanceCreateComputeInstance(self, gi: Any, profile_id: int) -> Any:
        self._check("nvmlGpuInstanceCreateComputeInstance")
        g = self._gi(gi)
        slices = {v: k for k, v in self._CI_INDEX.items()}.get(profile_id)
        if slices is None or slices > g.profile.compute_slices:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        if g.cis:  # one full-size compute instance per GPU instance is all we model
            raise NVMLError(self.NVML_ERROR_INSUFFICIENT_RESOURCES)
        token = self._token()
        g.cis[0] = (token, profile_id)
        self._ci_owner[token] = g.token
        return ctypes.cast(ctypes.c_void_p(token), c_nvmlComputeInstance_t)

    def nvmlGpuInstanceGetComputeInstances(
        self, gi: Any, profile_id: int, instances: Any, count: Any
    ) -> int:
        self._check("nvmlGpuInstanceGetComputeInstances")
        g = self._gi(gi)
        found = [token for token, prof in g.cis.values() if prof == profile_id]
        if len(found) > _deref(count).value:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        for i, token in enumerate(found):
            instances[i] = ctypes.cast(ctypes.c_void_p(token), c_nvmlComputeInstance_t)
        _deref(count).value = len(found)
        return 0

    def nvmlComputeInstanceGetInfo(self, ci: Any) -> Any:
        self._check("nvmlComputeInstanceGetInfo")
        token = ctypes.cast(ci, ctypes.c_void_p).value or 0
        if token not in self._ci_owner:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        g = self._gis[self._ci_owner[token]]
        ci_id = next(k for k, (t, _) in g.cis.items() if t == token)
        return _Info(ci_id, g.profile.compute_slices)

    def nvmlComputeInstanceDestroy(self, ci: Any) -> int:
        self._check("nvmlComputeInstanceDestroy")
        token = ctypes.cast(ci, ctypes.c_void_p).value or 0
        owner = self._ci_owner.pop(token, None)
        if owner is None:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        g = self._gis[owner]
        g.cis = {k: v for k, v in g.cis.items() if v[0] != token}
        return 0

    def nvmlGpuInstanceDestroy(self, gi: Any) -> int:
        self._check("nvmlGpuInstanceDestroy")
        g = self._gi(gi)
        if g.cis:
            raise NVMLError(self.NVML_ERROR_IN_USE)
        del self._gis[g.token]
        return 0
