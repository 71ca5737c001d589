from __future__ import annotations

import pytest

from gpu_platform.domain.allocation.mig_tables import (
    A100_40GB,
    A100_80GB,
    COMPUTE_SLICES,
    H100_80GB,
    MEMORY_SLICES,
    MIG_MODELS,
    MigGpuModel,
)

MODELS = [A100_40GB, A100_80GB, H100_80GB]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_placement_of_every_profile_lies_inside_the_eight_memory_slices(
    model: MigGpuModel,
) -> None:
    for p in model.profiles:
        assert p.starts, p.name
        for start in p.starts:
            assert start % p.memory_slices == 0 or p.memory_slices == 1
            assert start >= 0 and start + p.memory_slices <= MEMORY_SLICES
        assert 1 <= p.compute_slices <= COMPUTE_SLICES


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_a_profiles_own_placements_never_overlap_each_other(model: MigGpuModel) -> None:
    for p in model.profiles:
        cells = [c for s in p.starts for c in p.slices(s)]
        assert len(cells) == len(set(cells)), p.name
        assert p.max_instances <= len(p.starts)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_profile_ids_and_names_match_nvidia_smi(model: MigGpuModel) -> None:
    unit = {"A100-SXM4-40GB": 5, "A100-SXM4-80GB": 10, "H100-SXM5-80GB": 10}[model.name]
    expected = {
        0: f"7g.{8 * unit}gb",
        5: f"4g.{4 * unit}gb",
        9: f"3g.{4 * unit}gb",
        14: f"2g.{2 * unit}gb",
        15: f"1g.{2 * unit}gb",
        20: f"1g.{unit}gb+me",
        19: f"1g.{unit}gb",
    }
    assert {p.profile_id: p.name for p in model.profiles} == expected
    assert model.profile(9) is model.profile(expected[9])


def test_three_slice_profiles_take_four_memory_slices_on_h100_as_on_a100() -> None:
    for model in MODELS:
        p = model.profile(9)
        assert (p.compute_slices, p.memory_slices, p.starts) == (3, 4, (0, 4))


def test_the_models_are_indexed_by_name_and_an_unknown_profile_is_a_key_error() -> None:
    assert set(MIG_MODELS) == {m.name for m in MODELS}
    with pytest.raises(KeyError):
        H100_80GB.profile("5g.50gb")
