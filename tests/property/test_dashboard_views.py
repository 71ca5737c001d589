"""Invariants of the dashboard's view models and chart, over generated jobs, GPUs and usage;
and the SSE naming of domain events."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.adapters.inbound.web.chart import Bucket, _nice, svg_chart
from gpu_platform.adapters.inbound.web.stream import classify, sse
from gpu_platform.adapters.inbound.web.views import (
    STATE_ORDER,
    gpu_counts,
    node_grids,
    queue_rows,
    tenant_rows,
)
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.events import GpuStateChanged, JobSubmitted, QuotaChanged
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.ports.inbound.job_service import GpuInfo

TENANTS = ("a", "b", "c")


@st.composite
def jobs(draw: st.DrawFn) -> list[Job]:
    n = draw(st.integers(0, 25))
    out = []
    for seq in range(n):
        state = draw(st.sampled_from(list(JobState)))
        spec = JobSpec(
            command=("true",),
            gpus=draw(st.integers(1, 8)),
            tenant=draw(st.sampled_from(TENANTS)),
            priority=draw(st.integers(-5, 5)),
        )
        finished = float(draw(st.integers(1, 100))) if state in (JobState.COMPLETED,) else None
        out.append(Job(f"j-{seq}", spec, state, 0.0, seq=seq, finished_at=finished))
    return out


@given(
    jobs(), st.sampled_from([None, *[str(s) for s in JobState]]), st.sampled_from([None, *TENANTS])
)
def test_the_queue_lists_queued_jobs_first_in_scheduling_order(
    found: list[Job], state: str | None, tenant: str | None
) -> None:
    rows = queue_rows(found, {}, state, tenant, finished_limit=1000)
    assert all((state is None or r.state == state) for r in rows)
    assert all((tenant is None or r.tenant == tenant) for r in rows)
    assert {r.id for r in rows} == {
        j.id
        for j in found
        if (state is None or str(j.state) == state) and (tenant is None or j.spec.tenant == tenant)
    }
    rank = {"QUEUED": 0, "PENDING": 1, "SCHEDULED": 2, "RUNNING": 2, "PREEMPTED": 2}
    groups = [rank.get(r.state, 3) for r in rows]
    assert groups == sorted(groups)
    queued = [(-r.priority, int(r.id[2:])) for r in rows if r.state == "QUEUED"]
    assert queued == sorted(queued)


@given(st.lists(st.sampled_from(list(GpuState)), min_size=8, max_size=8))
def test_gpu_counts_cover_every_state_and_sum_to_the_gpus(states: list[GpuState]) -> None:
    node = default_node()
    infos = [GpuInfo(g, s, None) for g, s in zip(node.gpus, states, strict=True)]
    counts = gpu_counts(infos)
    assert list(counts) == [str(s) for s in STATE_ORDER]
    assert sum(counts.values()) == 8
    (grid,) = node_grids(infos, [], {})
    assert [t.index for t in grid.tiles] == list(range(8))
    assert [t.state for t in grid.tiles] == [str(s) for s in states]


@given(jobs(), st.dictionaries(st.sampled_from(TENANTS), st.integers(0, 16)))
def test_tenant_rows_count_held_gpus_once_per_tenant(
    found: list[Job], quotas: dict[str, int]
) -> None:
    rows = tenant_rows({t: Quota(g) for t, g in quotas.items()}, found, {})
    assert [r.tenant for r in rows] == sorted({r.tenant for r in rows})
    assert sum(r.in_use for r in rows) == sum(j.spec.gpus for j in found if j.holds_gpus)
    assert set(quotas) <= {r.tenant for r in rows}


@given(st.floats(0, 1e6, allow_nan=False))
def test_the_chart_axis_top_is_at_or_above_the_peak(peak: float) -> None:
    top = _nice(peak)
    assert top >= peak and top > 0


@given(
    st.lists(
        st.dictionaries(st.sampled_from(["a", "<b>", "c&d"]), st.floats(0, 50, allow_nan=False)),
        min_size=1,
        max_size=24,
    )
)
def test_the_chart_has_one_bar_per_tenant_and_bucket_with_use_and_escapes_names(
    hours: list[dict[str, float]],
) -> None:
    buckets = [Bucket(i * 60.0, (i + 1) * 60.0, h) for i, h in enumerate(hours)]
    svg = svg_chart(buckets, "GPU-hours", 1)
    bars = sum(1 for h in hours for v in h.values() if v > 0)
    assert len(re.findall(r"<rect [^>]*><title>", svg)) == bars
    assert "<b>" not in svg and 'role="img"' in svg


def test_domain_events_become_sse_events_named_by_what_they_change() -> None:
    assert classify(JobSubmitted("j-1", 2)) == ("job", {"type": "JobSubmitted", "job_id": "j-1"})
    changed = GpuStateChanged("node-0", 3, "GPU-x", GpuState.AVAILABLE, GpuState.DRAINING, "r")
    assert classify(changed) == ("gpu", {"type": "GpuStateChanged", "node": "node-0"})
    assert classify(QuotaChanged("a", None))[0] == "cluster"
    assert sse("job", {"job_id": "j-1"}) == 'event: job\ndata: {"job_id":"j-1"}\n\n'
