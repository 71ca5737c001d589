"""Curve bands over seeds, and FGD's published per-seed curves (synthetic rows and the real
expected-results files in ../shared)."""

from __future__ import annotations

import csv

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.application.simulation import curve_band, published_curves, published_means
from gpu_platform.testing.system import require_shared

EXPECTED = ("traces", "fgd-simulator-expected-results")
WORKLOADS = ("cpu050", "default", "gpushare40", "gpuspec20", "multigpu30")


@given(
    st.integers(1, 6).flatmap(
        lambda n: st.lists(
            st.lists(st.floats(0, 100, allow_nan=False), min_size=n, max_size=n),
            min_size=1,
            max_size=5,
        )
    )
)
def test_the_band_holds_the_mean_between_the_lowest_and_highest_curve(
    curves: list[list[float]],
) -> None:
    band = curve_band(curves)
    assert len(band.mean) == len(band.low) == len(band.high) == len(curves[0])
    for k, (m, lo, hi) in enumerate(zip(band.mean, band.low, band.high, strict=True)):
        assert lo == min(c[k] for c in curves) and hi == max(c[k] for c in curves)
        assert lo - 1e-9 <= m <= hi + 1e-9


def test_a_band_needs_curves_of_one_length() -> None:
    with pytest.raises(ValueError, match="no curves"):
        curve_band([])
    with pytest.raises(ValueError, match="length"):
        curve_band([[1.0, 2.0], [1.0]])


def test_published_rows_are_kept_per_policy_under_our_names_for_one_workload() -> None:
    rows = [
        {"workload": "w", "sc_policy": "05-BestFit", "tune": "1.3", "seed": "42", "total_gpus": "8", "1": "2.5", "0": "1"},
        {"workload": "w", "sc_policy": "05-BestFit", "tune": "1.3", "seed": "43", "total_gpus": "8", "0": "0", "1": "3"},
        {"workload": "w", "sc_policy": "07-New", "tune": "1.3", "seed": "42", "0": "0", "1": "1"},
        {"workload": "other", "sc_policy": "06-FGD", "tune": "1.3", "seed": "42", "0": "9", "1": "9"},
    ]  # fmt: skip
    curves = published_curves(rows, "w")
    assert curves == {"bestfit": [(1.0, 2.5), (0.0, 3.0)], "07-New": [(0.0, 1.0)]}
    with pytest.raises(ValueError, match="w/06-FGD seed 1"):
        published_curves([{"workload": "w", "sc_policy": "06-FGD", "seed": "1", "0": "x"}], "w")


def test_the_real_published_curves_agree_with_the_published_means() -> None:
    base = require_shared(*EXPECTED)
    with (base / "analysis_allo_discrete.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    with (base / "DERIVED_summary_by_workload_policy.csv").open(newline="") as fh:
        summary = list(csv.DictReader(fh))
    for w in WORKLOADS:
        workload = f"openb_pod_list_{w}"
        curves = published_curves(rows, workload)
        means = published_means(summary, workload)
        assert set(curves) == set(means) == {
            "random", "dotprod", "gpuclustering", "packing", "bestfit", "fgd",
        }  # fmt: skip
        for policy, runs in curves.items():
            assert len(runs) == 10 and all(len(c) == 131 for c in runs)
            band = curve_band(runs)
            assert band.mean[130] == pytest.approx(means[policy]["alloc_pct_at_130"], abs=0.006)
            assert band.mean[100] == pytest.approx(means[policy]["alloc_pct_at_100"], abs=0.006)
            assert all(0 <= v <= 100 for v in band.high)


def test_the_published_fragmentation_curves_read_the_same_way() -> None:
    """The upstream fragmentation file has the same layout without `total_gpus`."""
    base = require_shared(*EXPECTED)
    with (base / "analysis_frag_discrete.csv").open(newline="") as fh:
        curves = published_curves(csv.DictReader(fh), "openb_pod_list_default")
    assert len(curves["fgd"]) == 10 and all(len(c) == 131 for c in curves["fgd"])
    # FGD keeps less of the cluster fragmented than Random once it fills up
    assert curve_band(curves["fgd"]).mean[90] < curve_band(curves["random"]).mean[90]
