"""NvmlMigController: the MigController port over nvidia-ml-py (`pynvml`), imported lazily.

Calls (nvidia-ml-py 13.x names): nvmlInit; nvmlDeviceGetHandleByIndex; nvmlDeviceGetMigMode;
nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_*) for the profile ids;
nvmlDeviceGetGpuInstancePossiblePlacements (memory-slice start/size);
nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, byref(placement));
nvmlGpuInstanceGetComputeInstanceProfileInfo + nvmlGpuInstanceCreateComputeInstance (one
full-size compute instance per GPU instance); nvmlDeviceGetGpuInstances /
nvmlGpuInstanceGetComputeInstances (caller-allocated handle arrays) to enumerate;
nvmlComputeInstanceDestroy then nvmlGpuInstanceDestroy to remove. The MIG device's UUID
("MIG-..."): nvmlDeviceGetMaxMigDeviceCount + nvmlDeviceGetMigDeviceHandleByIndex (NOT_FOUND for
an empty index), matched by nvmlDeviceGetGpuInstanceId / nvmlDeviceGetComputeInstanceId, then
nvmlDeviceGetUUID on the MIG handle.

NVMLError mapping: NOT_SUPPORTED on a MIG call -> MigNotEnabled; INSUFFICIENT_RESOURCES /
INVALID_ARGUMENT / IN_USE on create -> MigPlacementRejected; anything else -> GpuControlError
carrying the NVML code; `import pynvml` failing or LIBRARY_NOT_FOUND -> ControllerUnavailable.
"""

from __future__ import annotations

import ctypes
from typing import Any

from gpu_platform.ports.outbound.gpu_controller import (
    ControllerUnavailable,
    GpuControlError,
    MigInstanceInfo,
    MigNotEnabled,
    MigPlacementRejected,
)

__all__ = ["NvmlMigController"]

_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_LIBRARY_NOT_FOUND = 12
_REJECTED = {2, 19, 23}  # INVALID_ARGUMENT, IN_USE, INSUFFICIENT_RESOURCES
_GI_PROFILE_INDICES = range(10)  # NVML_GPU_INSTANCE_PROFILE_1_SLICE .. _1_SLICE_REV2
_CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}  # NVML_COMPUTE_INSTANCE_PROFILE_*


def _code(e: BaseException) -> int:
    return int(getattr(e, "value", -1))


class NvmlMigController:
    """Creates/destroys MIG instances through NVML. `nvml` is the pynvml module (or a fake);
    by default `import pynvml` on first use. Needs root or the mig-config capability on a
    real machine. Serialise calls per GPU (NVML itself is thread-safe)."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml
        self._ready = False

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except Exception as e:
                raise ControllerUnavailable(f"nvidia-ml-py (pynvml) cannot be imported: {e}") from e
            self._nvml = pynvml
        if not self._ready:
            try:
                self._nvml.nvmlInit()
            except Exception as e:
                if _code(e) == _LIBRARY_NOT_FOUND or "not found" in str(e).lower():
                    raise ControllerUnavailable(f"NVML library absent: {e}") from e
                raise GpuControlError(f"nvmlInit failed: {e}") from e
            self._ready = True
        return self._nvml

    def close(self) -> None:
        if self._ready and self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._ready = False

    def _call(self, name: str, *args: Any) -> Any:
        nv = self.nvml
        try:
            return getattr(nv, name)(*args)
        except nv.NVMLError as e:
            if _code(e) == _NOT_SUPPORTED:
                raise MigNotEnabled(f"{name}: MIG is not enabled or not supported ({e})") from e
            raise GpuControlError(f"{name} failed: {e} (NVML code {_code(e)})") from e

    def _handle(self, gpu_index: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", gpu_index)

    def mig_enabled(self, gpu_index: int) -> bool:
        try:
            current, _pending = self._call("nvmlDeviceGetMigMode", self._handle(gpu_index))
        except MigNotEnabled:
            return False
        return bool(current == self.nvml.NVML_DEVICE_MIG_ENABLE)

    def _profiles(self, handle: Any) -> dict[int, Any]:
        """profile id -> profile info, for every GPU-instance profile the device offers."""
        out: dict[int, Any] = {}
        for index in _GI_PROFILE_INDICES:
            try:
                info = self._call("nvmlDeviceGetGpuInstanceProfileInfo", handle, index)
            except (MigNotEnabled, GpuControlError):
                continue
            out[int(info.id)] = info
        return out

    def possible_placements(self, gpu_index: int, profile_id: int) -> list[tuple[int, int]]:
        """(start, size) in memory slices that the driver allows for `profile_id`."""
        handle = self._handle(gpu_index)
        info = self._profiles(handle).get(profile_id)
        if info is None:
            raise MigPlacementRejected(f"GPU {gpu_index} has no MIG profile id {profile_id}")
        return self._placements(handle, info)

    def _placements(self, handle: Any, info: Any) -> list[tuple[int, int]]:
        nv = self.nvml
        capacity = max(int(info.instanceCount), 8)
        array = (nv.c_nvmlGpuInstancePlacement_t * capacity)()
        count = ctypes.c_uint(capacity)
        self._call(
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            handle,
            info.id,
            array,
            ctypes.byref(count),
        )
        return [(int(array[i].start), int(array[i].size)) for i in range(count.value)]

    def create_mig_instance(self, gpu_index: int, profile_id: int, start: int) -> MigInstanceInfo:
        if not self.mig_enabled(gpu_index):
            raise MigNotEnabled(f"GPU {gpu_index}: MIG mode is off")
        nv = self.nvml
        handle = self._handle(gpu_index)
        info = self._profiles(handle).get(profile_id)
        if info is None:
            raise MigPlacementRejected(f"GPU {gpu_index} has no MIG profile id {profile_id}")
        sizes = dict(self._placements(handle, info))
        if start not in sizes:
            raise MigPlacementRejected(
                f"profile {profile_id} cannot start at slice {start} (allowed: {sorted(sizes)})"
            )
        placement = nv.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, sizes[start]
        try:
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(
                handle, profile_id, ctypes.byref(placement)
            )
        except nv.NVMLError as e:
            if _code(e) in _REJECTED:
                raise MigPlacementRejected(
                    f"GPU {gpu_index}: profile {profile_id} at slice {start} refused ({e})"
                ) from e
            raise GpuControlError(f"nvmlDeviceCreateGpuInstanceWithPlacement: {e}") from e
        try:
            ci_index = _CI_PROFILE_BY_SLICES[int(info.sliceCount)]
            ci_info = self._call(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                gi,
                ci_index,
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            )
            ci = self._call("nvmlGpuInstanceCreateComputeInstance", gi, ci_info.id)
        except Exception:
            self._call("nvmlGpuInstanceDestroy", gi)
            raise
        return self._describe(gpu_index, handle, gi, [ci])

    def _describe(self, gpu_index: int, handle: Any, gi: Any, cis: list[Any]) -> MigInstanceInfo:
        gi_info = self._call("nvmlGpuInstanceGetInfo", gi)
        ci_id = int(self._call("nvmlComputeInstanceGetInfo", cis[0]).id) if cis else -1
        return MigInstanceInfo(
            gpu_index=gpu_index,
            gpu_instance_id=int(gi_info.id),
            compute_instance_id=ci_id,
            profile_id=int(gi_info.profileId),
            start=int(gi_info.placement.start),
            size=int(gi_info.placement.size),
            uuid=self._mig_uuid(handle, int(gi_info.id), ci_id) if cis else "",
        )

    def _mig_uuid(self, handle: Any, gi_id: int, ci_id: int) -> str:
        """The UUID of the MIG device of (GPU instance, compute instance); "" if none."""
        nv = self.nvml
        for i in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except nv.NVMLError as e:
                if _code(e) == _NOT_FOUND:
                    continue
                raise GpuControlError(f"nvmlDeviceGetMigDeviceHandleByIndex: {e}") from e
            ids = (
                int(self._call("nvmlDeviceGetGpuInstanceId", mig)),
                int(self._call("nvmlDeviceGetComputeInstanceId", mig)),
            )
            if ids == (gi_id, ci_id):
                uuid = self._call("nvmlDeviceGetUUID", mig)
                return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        return ""

    def _compute_instances(self, gi: Any) -> list[Any]:
        nv = self.nvml
        found: list[Any] = []
        for index in sorted(set(_CI_PROFILE_BY_SLICES.values())):
            try:
                ci_info = self._call(
                    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                    gi,
                    index,
                    nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                )
            except (MigNotEnabled, GpuControlError):
                continue
            array = (nv.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(8)
            self._call(
                "nvmlGpuInstanceGetComputeInstances", gi, ci_info.id, array, ctypes.byref(count)
            )
            found += [array[i] for i in range(count.value)]
        return found

    def destroy_mig_instance(self, gpu_index: int, gpu_instance_id: int) -> None:
        handle = self._handle(gpu_index)
        nv = self.nvml
        try:
            gi = nv.nvmlDeviceGetGpuInstanceById(handle, gpu_instance_id)
        except nv.NVMLError as e:
            if _code(e) == _NOT_SUPPORTED:
                raise MigNotEnabled(f"GPU {gpu_index}: MIG mode is off") from e
            raise GpuControlError(
                f"GPU {gpu_index} has no GPU instance {gpu_instance_id} ({e})"
            ) from e
        for ci in self._compute_instances(gi):
            self._call("nvmlComputeInstanceDestroy", ci)
        self._call("nvmlGpuInstanceDestroy", gi)

    def list_mig_instances(self, gpu_index: int) -> list[MigInstanceInfo]:
        if not self.mig_enabled(gpu_index):
            return []
        nv = self.nvml
        handle = self._handle(gpu_index)
        out: list[MigInstanceInfo] = []
        for profile_id, info in self._profiles(handle).items():
            capacity = max(int(info.instanceCount), 1)
            array = (nv.c_nvmlGpuInstance_t * capacity)()
            count = ctypes.c_uint(capacity)
            self._call("nvmlDeviceGetGpuInstances", handle, profile_id, array, ctypes.byref(count))
            for i in range(count.value):
                gi = array[i]
                out.append(self._describe(gpu_index, handle, gi, self._compute_instances(gi)))
        return sorted(out, key=lambda m: (m.start, m.gpu_instance_id))
