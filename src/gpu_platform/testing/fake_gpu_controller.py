"""FakeGpuController: an in-memory GpuController (MIG half and MPS half) for application tests.

MIG state is a `domain.allocation.mig.MigLayout` per GPU, so it refuses exactly what the
placement rules refuse; GPU-instance ids are small integers assigned from 1, and every
created instance gets a fresh "MIG-<uuid>" device UUID. GPUs mapped to None have MIG off.
The MPS half remembers which daemons run and their default percentage.
"""

from __future__ import annotations

import threading
import uuid

from gpu_platform.domain.allocation.mig import MigLayout, MigPlacement, place, remove
from gpu_platform.domain.allocation.mig_tables import MigGpuModel
from gpu_platform.domain.errors import DomainError, InvalidRequest
from gpu_platform.ports.outbound.gpu_controller import (
    GpuControlError,
    MigInstanceInfo,
    MigNotEnabled,
    MigPlacementRejected,
    MpsError,
)

__all__ = ["FakeGpuController"]


class FakeGpuController:
    def __init__(self, gpus: dict[int, MigGpuModel | None]) -> None:
        self._layouts = {i: MigLayout(m) for i, m in gpus.items() if m is not None}
        self._gpus = dict(gpus)
        self._mps: dict[int, int] = {}  # gpu -> default active thread percentage
        self._uuids: dict[tuple[int, int], str] = {}  # (gpu, GPU-instance id) -> MIG UUID
        self._serial = 0
        self._lock = threading.Lock()

    def _layout(self, gpu_index: int) -> MigLayout:
        if gpu_index not in self._gpus:
            raise GpuControlError(f"no GPU {gpu_index}")
        if gpu_index not in self._layouts:
            raise MigNotEnabled(f"GPU {gpu_index}: MIG mode is off")
        return self._layouts[gpu_index]

    def mig_enabled(self, gpu_index: int) -> bool:
        return gpu_index in self._layouts

    def create_mig_instance(self, gpu_index: int, profile_id: int, start: int) -> MigInstanceInfo:
        with self._lock:
            layout = self._layout(gpu_index)
            try:
                profile = layout.model.profile(profile_id)
            except KeyError as e:
                raise MigPlacementRejected(str(e)) from e
            used = {int(i.instance_id) for i in layout.instances}
            gi_id = next(n for n in range(1, 64) if n not in used)
            try:
                self._layouts[gpu_index] = place(layout, str(gi_id), MigPlacement(profile, start))
            except (DomainError, InvalidRequest) as e:
                raise MigPlacementRejected(str(e)) from e
            self._serial += 1
            name = f"fake-mig/{gpu_index}/{gi_id}/{self._serial}"
            mig = self._uuids[(gpu_index, gi_id)] = f"MIG-{uuid.uuid5(uuid.NAMESPACE_OID, name)}"
            return MigInstanceInfo(
                gpu_index, gi_id, 0, profile_id, start, profile.memory_slices, mig
            )

    def destroy_mig_instance(self, gpu_index: int, gpu_instance_id: int) -> None:
        with self._lock:
            layout = self._layout(gpu_index)
            try:
                self._layouts[gpu_index] = remove(layout, str(gpu_instance_id))
            except DomainError as e:
                raise GpuControlError(str(e)) from e
            self._uuids.pop((gpu_index, gpu_instance_id), None)

    def list_mig_instances(self, gpu_index: int) -> list[MigInstanceInfo]:
        if gpu_index not in self._layouts:
            return []
        return [
            MigInstanceInfo(
                gpu_index,
                int(i.instance_id),
                0,
                i.profile.profile_id,
                i.start,
                i.profile.memory_slices,
                self._uuids[(gpu_index, int(i.instance_id))],
            )
            for i in self._layouts[gpu_index].instances
        ]

    def start_mps(self, gpu_index: int) -> None:
        with self._lock:
            self._mps.setdefault(gpu_index, 100)

    def stop_mps(self, gpu_index: int) -> None:
        with self._lock:
            self._mps.pop(gpu_index, None)

    def mps_running(self, gpu_index: int) -> bool:
        return gpu_index in self._mps

    def set_default_active_thread_percentage(self, gpu_index: int, percentage: int) -> None:
        with self._lock:
            if gpu_index not in self._mps:
                raise MpsError(f"no MPS daemon runs for GPU {gpu_index}")
            if not 1 <= percentage <= 100:
                raise MpsError(f"active thread percentage must be in 1..100, got {percentage}")
            self._mps[gpu_index] = percentage
