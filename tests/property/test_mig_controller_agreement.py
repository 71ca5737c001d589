"""The NVML MIG adapter (on the fake pynvml) and the in-memory FakeGpuController agree on
every random sequence of creates and destroys: same accept/reject decisions, same layouts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.nvml.mig import NvmlMigController
from gpu_platform.domain.allocation.mig_tables import MIG_MODELS
from gpu_platform.ports.outbound.gpu_controller import GpuControlError, MigController
from gpu_platform.testing.fake_gpu_controller import FakeGpuController
from gpu_platform.testing.fake_nvml_mig import FakeNvmlMig

_op = st.tuples(st.booleans(), st.integers(0, 6), st.integers(0, 7))


def _apply(ctl: MigController, create: bool, a: int, b: int, profiles: list[int]) -> str:
    try:
        if create:
            made = ctl.create_mig_instance(0, profiles[a], b)
            return f"created {made.profile_id}@{made.start}"
        live = ctl.list_mig_instances(0)
        if not live:
            return "empty"
        victim = live[a % len(live)]
        ctl.destroy_mig_instance(0, victim.gpu_instance_id)
        return f"destroyed {victim.profile_id}@{victim.start}"
    except GpuControlError as e:
        return type(e).__name__


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(sorted(MIG_MODELS)), ops=st.lists(_op, max_size=25))
def test_the_nvml_adapter_and_the_in_memory_fake_agree(
    model: str, ops: list[tuple[bool, int, int]]
) -> None:
    board = MIG_MODELS[model]
    profiles = [p.profile_id for p in board.profiles]
    nvml = NvmlMigController(FakeNvmlMig([(board, True)]))
    fake = FakeGpuController({0: board})
    for create, a, b in ops:
        assert _apply(nvml, create, a, b, profiles) == _apply(fake, create, a, b, profiles)
        shape = [(m.profile_id, m.start, m.size) for m in nvml.list_mig_instances(0)]
        assert shape == [(m.profile_id, m.start, m.size) for m in fake.list_mig_instances(0)]
