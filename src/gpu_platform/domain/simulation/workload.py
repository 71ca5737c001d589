"""A synthetic GPU job mix for the arrivals simulation, calibrated to public trace summaries.

Every distribution parameter is explicit (`WorkloadParams`); the defaults come from these
summaries in `shared/traces/` (read there, never copied; `tests/unit/scheduling/
test_workload.py` re-derives them from the files when they are present):

- sizes: Helios `helios_cluster_summary.csv`, row `total`: median GPUs per GPU job 1, mean
  3.716. Within 1..8 GPUs the Tiresias `60_job.csv` mix (1: 50 %, 2/4/8: 1/6 each) sets the
  shape; gangs of 2 and 4 x 8 GPUs (no public trace has multi-node gangs) make up the tail so
  that the mean is 3.76. The weights below: 1 GPU 0.60, 2: 0.10, 4: 0.10, 8: 0.13, 2x8: 0.045,
  4x8: 0.025.
- durations: log-normal fitted to Helios `total` GPU jobs, median run time 206 s and mean
  6651.7 s: mu = ln 206 = 5.328, sigma = sqrt(2 ln(6651.7 / 206)) = 2.636; capped at
  `max_duration_s` (2 days), which lowers the mean to about 4,600 s.
- tenants: Helios `Earth_gpu_number.csv`, 2020-04-01: the 16 virtual clusters with GPUs
  (112, 128, 32, 48, 96, 32, 56, 48, 16, 64, 16, 16, 24, 8, 80, 8 GPUs) submit in
  proportion to their size.
- arrivals: Poisson, rate set so that offered load (GPU-seconds asked per second / cluster
  GPUs) is `load`.

Not in any trace (assumptions, stated): priorities 0/1/2 with probability 0.7/0.2/0.1; a
time limit of duration x U(1, 2) for 90 % of jobs and none for the rest.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["EARTH_VC_GPUS", "SimJob", "WorkloadParams", "generate"]

EARTH_VC_GPUS = (112, 128, 32, 48, 96, 32, 56, 48, 16, 64, 16, 16, 24, 8, 80, 8)


@dataclass(frozen=True, slots=True)
class SimJob:
    """One synthetic job: `tasks` x `gpus_per_task` GPUs for `duration_s` seconds, submitted
    at `submit_s`; `time_limit_s` is what the user declared (None = no limit)."""

    id: str
    tenant: str
    submit_s: float
    tasks: int
    gpus_per_task: int
    duration_s: float
    priority: int
    time_limit_s: float | None

    @property
    def gpus(self) -> int:
        return self.tasks * self.gpus_per_task


@dataclass(frozen=True, slots=True)
class WorkloadParams:
    """Distribution parameters (defaults: see the module docstring for their sources).
    `sizes`: ((tasks, GPUs per task), weight). Durations: log-normal (`duration_mu`,
    `duration_sigma`) in seconds, capped at `max_duration_s`."""

    sizes: tuple[tuple[tuple[int, int], float], ...] = (
        ((1, 1), 0.60),
        ((1, 2), 0.10),
        ((1, 4), 0.10),
        ((1, 8), 0.13),
        ((2, 8), 0.045),
        ((4, 8), 0.025),
    )
    duration_mu: float = math.log(206.0)
    duration_sigma: float = math.sqrt(2 * math.log(6651.681 / 206.0))
    max_duration_s: float = 2 * 86_400.0
    tenant_weights: tuple[tuple[str, float], ...] = tuple(
        (f"vc{i:02d}", float(g)) for i, g in enumerate(EARTH_VC_GPUS)
    )
    priorities: tuple[tuple[int, float], ...] = ((0, 0.7), (1, 0.2), (2, 0.1))
    limit_factor: tuple[float, float] = (1.0, 2.0)
    no_limit_fraction: float = 0.1
    load: float = 1.1

    def mean_gpus(self) -> float:
        total = sum(w for _, w in self.sizes)
        return sum(t * g * w for (t, g), w in self.sizes) / total

    def mean_duration_s(self, rng: random.Random, samples: int = 20_000) -> float:
        """Mean of the capped log-normal, by sampling with `rng` (deterministic)."""
        return sum(self._duration(rng) for _ in range(samples)) / samples

    def _duration(self, rng: random.Random) -> float:
        d = rng.lognormvariate(self.duration_mu, self.duration_sigma)
        return max(1.0, min(self.max_duration_s, round(d)))


def generate(
    n: int, cluster_gpus: int, rng: random.Random, params: WorkloadParams | None = None
) -> list[SimJob]:
    """`n` jobs with Poisson arrivals for a cluster of `cluster_gpus` GPUs, drawn with `rng`."""
    p = params or WorkloadParams()
    mean_work = p.mean_gpus() * p.mean_duration_s(random.Random(rng.random()))
    rate = p.load * cluster_gpus / mean_work  # jobs per second
    sizes, size_w = zip(*p.sizes, strict=True)
    tenants, tenant_w = zip(*p.tenant_weights, strict=True)
    prios, prio_w = zip(*p.priorities, strict=True)
    jobs: list[SimJob] = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        tasks, per = rng.choices(sizes, size_w)[0]
        duration = p._duration(rng)
        limit: float | None = None
        if rng.random() >= p.no_limit_fraction:
            limit = float(math.ceil(duration * rng.uniform(*p.limit_factor)))
        jobs.append(
            SimJob(
                f"s{i:06d}",
                rng.choices(tenants, tenant_w)[0],
                round(t, 3),
                tasks,
                per,
                duration,
                rng.choices(prios, prio_w)[0],
                limit,
            )
        )
    return jobs
