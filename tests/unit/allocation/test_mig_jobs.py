"""Jobs on MIG instances, the pure part: which models host a profile, what submit refuses, and
which instance a job gets on its GPU."""

from __future__ import annotations

import pytest

from gpu_platform.domain.allocation.mig import (
    MigInstance,
    MigLayout,
    MigNoFit,
    MigPlacement,
    MigReconfigurationPlan,
    place,
)
from gpu_platform.domain.allocation.mig_jobs import (
    check_mig_request,
    choose_slice,
    known_mig_profiles,
    mig_model,
    models_hosting,
)
from gpu_platform.domain.allocation.mig_tables import A100_40GB, A100_80GB, H100_80GB
from gpu_platform.domain.errors import InvalidRequest


def _layout(*instances: tuple[str, str, int]) -> MigLayout:
    layout = MigLayout(A100_80GB)
    for iid, name, start in instances:
        layout = place(layout, iid, MigPlacement(A100_80GB.profile(name), start))
    return layout


def test_the_mig_table_is_found_with_or_without_nvmls_vendor_prefix() -> None:
    assert mig_model("A100-SXM4-40GB") is A100_40GB
    assert mig_model("NVIDIA H100-SXM5-80GB") is H100_80GB
    assert mig_model("L40S") is None


def test_only_models_whose_table_has_the_profile_host_it() -> None:
    models = ["A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "H100-SXM5-80GB", "L40S"]
    assert models_hosting("1g.5gb", models) == {"A100-SXM4-40GB"}
    assert models_hosting("3g.40gb", models) == {"NVIDIA A100-SXM4-80GB", "H100-SXM5-80GB"}
    assert models_hosting("9g.99gb", models) == frozenset()
    assert "1g.10gb" in known_mig_profiles() and "7g.40gb" in known_mig_profiles()


def test_an_unknown_profile_is_refused_naming_the_field_and_the_known_ones() -> None:
    with pytest.raises(InvalidRequest) as err:
        check_mig_request("2g.7gb", 1, ["A100-SXM4-80GB"])
    assert err.value.field == "mig_profile"
    assert "unknown MIG profile '2g.7gb'" in err.value.reason and "1g.10gb" in err.value.reason


@pytest.mark.parametrize("gpus", [0, 2])
def test_a_mig_job_must_ask_for_exactly_one_gpu(gpus: int) -> None:
    with pytest.raises(InvalidRequest) as err:
        check_mig_request("1g.10gb", gpus, ["A100-SXM4-80GB"])
    assert err.value.field == "mig_profile" and "gpus must be 1" in err.value.reason


def test_a_profile_no_gpu_of_the_cluster_has_is_refused_as_never_placeable() -> None:
    with pytest.raises(InvalidRequest) as err:
        check_mig_request("1g.5gb", 1, ["A100-SXM4-80GB", "L40S"])
    assert err.value.field == "mig_profile" and "could never be placed" in err.value.reason
    with pytest.raises(InvalidRequest, match="of model H100"):
        check_mig_request("1g.5gb", 1, ["A100-SXM4-40GB", "H100-SXM5-80GB"], ["H100-SXM5-80GB"])
    assert check_mig_request("1g.10gb", 1, ["A100-SXM4-80GB", "L40S"]) == {"A100-SXM4-80GB"}


def test_a_usable_live_instance_of_the_profile_is_reused_lowest_start_first() -> None:
    layout = _layout(("5", "1g.10gb", 2), ("3", "1g.10gb", 0), ("4", "3g.40gb", 4))
    choice = choose_slice(layout, "1g.10gb", usable={"5", "3", "4"})
    assert isinstance(choice, MigInstance) and choice.instance_id == "3"
    assert choose_slice(layout, "1g.10gb", usable={"5"}) == layout.get("5")


def test_without_a_usable_instance_the_planner_places_a_new_one() -> None:
    layout = _layout(("1", "3g.40gb", 0))
    choice = choose_slice(layout, "1g.10gb", usable=set())
    assert isinstance(choice, MigReconfigurationPlan)
    assert choice.destroy == () and choice.new.start in (4, 5, 6, 7)


def test_a_full_gpu_says_why_nothing_fits() -> None:
    layout = _layout(("1", "7g.80gb", 0))
    choice = choose_slice(layout, "1g.10gb", usable={"1"})
    assert isinstance(choice, MigNoFit) and "compute slices" in choice.reason


def test_a_profile_of_another_board_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as err:
        choose_slice(MigLayout(A100_80GB), "1g.5gb", usable=set())
    assert err.value.field == "mig_profile"
