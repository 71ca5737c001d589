"""The synthetic job mix: deterministic per seed, and its defaults re-derived from the trace
summaries in ../shared/traces (read there; the repository holds only the parameters)."""

from __future__ import annotations

import csv
import itertools
import math
import random
import statistics

from gpu_platform.domain.simulation.workload import EARTH_VC_GPUS, WorkloadParams, generate
from gpu_platform.testing.system import require_shared


def helios_total() -> dict[str, str]:
    path = require_shared("traces", "helios-artifact", "helios_cluster_summary.csv")
    with path.open() as f:
        return next(row for row in csv.DictReader(f) if row["id"] == "total")


def test_the_size_mix_has_the_helios_median_and_about_its_mean() -> None:
    total = helios_total()
    p = WorkloadParams()
    sizes = [j.gpus for j in generate(20_000, 256, random.Random(3), p)]
    assert statistics.median(sizes) == float(total["med_gpu_num"]) == 1.0
    assert abs(p.mean_gpus() - float(total["avg_gpu_num"])) / float(total["avg_gpu_num"]) < 0.02


def test_the_duration_log_normal_is_fitted_to_the_helios_median_and_mean() -> None:
    total = helios_total()
    p = WorkloadParams()
    median, mean = float(total["med_run_time_gpu"]), float(total["avg_run_time_gpu"])
    assert math.isclose(math.exp(p.duration_mu), median)
    assert math.isclose(math.exp(p.duration_mu + p.duration_sigma**2 / 2), mean)


def test_tenants_are_the_earth_virtual_clusters_of_the_first_day() -> None:
    path = require_shared("traces", "helios-artifact", "Earth_gpu_number.csv")
    with path.open() as f:
        first = next(csv.DictReader(f))
    sizes = tuple(int(v) for k, v in first.items() if k not in ("date", "total") and int(v) > 0)
    assert sizes == EARTH_VC_GPUS


def test_within_one_node_the_mix_follows_the_tiresias_trace_shape() -> None:
    path = require_shared("traces", "tiresias-simulator", "60_job.csv")
    with path.open() as f:
        counts: dict[int, int] = {}
        for row in csv.DictReader(f):
            counts[int(row["num_gpu"])] = counts.get(int(row["num_gpu"]), 0) + 1
    assert counts == {1: 30, 2: 10, 4: 10, 8: 10}  # 2, 4 and 8 equally common
    weights = dict(((t, g), w) for (t, g), w in WorkloadParams().sizes)
    assert weights[(1, 2)] == weights[(1, 4)]


def test_the_same_seed_gives_the_same_jobs() -> None:
    a = generate(200, 64, random.Random(11))
    b = generate(200, 64, random.Random(11))
    assert a == b
    assert all(x.submit_s < y.submit_s for x, y in itertools.pairwise(a))
    assert all(j.time_limit_s is None or j.time_limit_s >= j.duration_s for j in a)
