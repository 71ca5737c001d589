"""Contracts of the MigController and MpsController ports.

Subclass `MigControllerContract` and implement `make_controller()` returning a controller whose
GPU 0 is an A100-40GB with MIG on and GPU 1 has MIG off; subclass `MpsControllerContract` and
implement `make_mps()` (a fresh controller; the suite stops what it starts).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_platform.domain.allocation.mig_tables import A100_40GB
from gpu_platform.ports.outbound.gpu_controller import (
    GpuControlError,
    MigController,
    MigNotEnabled,
    MigPlacementRejected,
    MpsController,
    MpsError,
)

__all__ = ["MigControllerContract", "MpsControllerContract"]

P_3G, P_1G, P_7G = 9, 19, 0  # A100 profile ids (3g.20gb, 1g.5gb, 7g.40gb)


class MigControllerContract:
    def make_controller(self) -> MigController:
        raise NotImplementedError

    @pytest.fixture
    def ctl(self) -> MigController:
        return self.make_controller()

    def test_mig_mode_is_reported_per_gpu(self, ctl: MigController) -> None:
        assert ctl.mig_enabled(0) is True
        assert ctl.mig_enabled(1) is False

    def test_every_placement_of_every_profile_can_be_created_and_destroyed(
        self, ctl: MigController
    ) -> None:
        for profile in A100_40GB.profiles:
            for start in profile.starts:
                made = ctl.create_mig_instance(0, profile.profile_id, start)
                assert (made.profile_id, made.start, made.size) == (
                    profile.profile_id,
                    start,
                    profile.memory_slices,
                )
                assert ctl.list_mig_instances(0) == [made]
                ctl.destroy_mig_instance(0, made.gpu_instance_id)
                assert ctl.list_mig_instances(0) == []

    def test_an_overlapping_instance_is_rejected_and_the_first_survives(
        self, ctl: MigController
    ) -> None:
        first = ctl.create_mig_instance(0, P_3G, 4)
        with pytest.raises(MigPlacementRejected):
            ctl.create_mig_instance(0, P_1G, 5)
        with pytest.raises(MigPlacementRejected):
            ctl.create_mig_instance(0, P_7G, 0)
        assert ctl.list_mig_instances(0) == [first]

    def test_an_illegal_start_is_rejected(self, ctl: MigController) -> None:
        with pytest.raises(MigPlacementRejected):
            ctl.create_mig_instance(0, P_3G, 2)

    def test_instances_are_listed_by_start_with_distinct_ids(self, ctl: MigController) -> None:
        a = ctl.create_mig_instance(0, P_1G, 6)
        b = ctl.create_mig_instance(0, P_3G, 0)
        c = ctl.create_mig_instance(0, P_1G, 4)
        listed = ctl.list_mig_instances(0)
        assert [m.start for m in listed] == [0, 4, 6]
        assert {m.gpu_instance_id for m in listed} == {
            a.gpu_instance_id,
            b.gpu_instance_id,
            c.gpu_instance_id,
        }
        assert len({m.gpu_instance_id for m in listed}) == 3

    def test_every_instance_is_a_mig_device_with_its_own_uuid(self, ctl: MigController) -> None:
        a = ctl.create_mig_instance(0, P_1G, 0)
        b = ctl.create_mig_instance(0, P_1G, 1)
        assert a.uuid.startswith("MIG-") and b.uuid.startswith("MIG-")
        assert a.uuid != b.uuid
        assert {m.uuid for m in ctl.list_mig_instances(0)} == {a.uuid, b.uuid}
        ctl.destroy_mig_instance(0, a.gpu_instance_id)
        again = ctl.create_mig_instance(0, P_1G, 0)
        assert again.uuid.startswith("MIG-") and again.uuid not in (a.uuid, b.uuid)

    def test_a_gpu_with_mig_off_refuses_to_create(self, ctl: MigController) -> None:
        with pytest.raises(MigNotEnabled):
            ctl.create_mig_instance(1, P_1G, 0)
        assert ctl.list_mig_instances(1) == []

    def test_destroying_an_unknown_instance_is_an_error(self, ctl: MigController) -> None:
        with pytest.raises(GpuControlError):
            ctl.destroy_mig_instance(0, 42)


class MpsControllerContract:
    def make_mps(self) -> MpsController:
        raise NotImplementedError

    @pytest.fixture
    def mps(self) -> Iterator[MpsController]:
        ctl = self.make_mps()
        yield ctl
        for gpu in (0, 1):
            ctl.stop_mps(gpu)

    def test_start_runs_a_daemon_per_gpu_and_is_idempotent(self, mps: MpsController) -> None:
        assert not mps.mps_running(0)
        mps.start_mps(0)
        mps.start_mps(0)
        assert mps.mps_running(0) and not mps.mps_running(1)
        mps.start_mps(1)
        assert mps.mps_running(1)

    def test_stop_ends_the_daemon_and_is_idempotent(self, mps: MpsController) -> None:
        mps.start_mps(0)
        mps.stop_mps(0)
        assert not mps.mps_running(0)
        mps.stop_mps(0)
        mps.start_mps(0)  # and it can be started again
        assert mps.mps_running(0)

    def test_the_default_percentage_needs_a_running_daemon_and_a_valid_value(
        self, mps: MpsController
    ) -> None:
        with pytest.raises(MpsError):
            mps.set_default_active_thread_percentage(0, 50)
        mps.start_mps(0)
        mps.set_default_active_thread_percentage(0, 50)
        with pytest.raises(MpsError):
            mps.set_default_active_thread_percentage(0, 0)
