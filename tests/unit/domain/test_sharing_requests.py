"""What a user may ask of a GPU besides whole GPUs: `--gpus 0.25`, `--gpu-memory`, `--cpus`,
`--vendor`, `--sharing`; bad input is refused with the field named."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.cluster_state import ClusterState, SubmitJob
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.sharing import effective_sharing, parse_bytes, parse_gpus
from gpu_platform.domain.model_codec import decode_spec, encode_spec

GIB = 1 << 30


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("0.25", (1, 250)), ("0.5", (1, 500)), ("2", (2, 1000)), ("1", (1, 1000)), ("0", (0, 1000))],
)
def test_gpus_reads_a_share_of_one_gpu_or_whole_gpus(text: str, parsed: tuple[int, int]) -> None:
    assert parse_gpus(text) == parsed


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("1.5", "more than one GPU with a remainder"),
        ("-1", "must be 0, a fraction"),
        ("0.0005", "finer than a milli-GPU"),
        ("half", "not a number"),
    ],
)
def test_gpus_refuses_what_is_not_a_share_or_whole_gpus(text: str, why: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_gpus(text)
    assert refused.value.field == "gpus" and why in refused.value.reason


def test_gpu_memory_reads_binary_units() -> None:
    assert parse_bytes("10G") == 10 * GIB
    assert parse_bytes("512MiB") == 512 << 20
    with pytest.raises(InvalidRequest, match="gpu_memory"):
        parse_bytes("lots")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"gpus": 1, "gpu_milli": 0}, "gpu_milli"),
        ({"gpus": 1, "gpu_milli": -250}, "gpu_milli"),
        ({"gpus": 2, "gpu_milli": 500}, "gpu_milli"),
        ({"gpus": 1, "gpu_memory_bytes": -1}, "gpu_memory_bytes"),
        ({"gpus": 0, "gpu_memory_bytes": GIB}, "gpu_memory_bytes"),
        ({"cpu_milli": -1}, "cpu_milli"),
        ({"gpus": 1, "vendor": "3dfx"}, "vendor"),
        ({"gpus": 1, "gpu_milli": 500, "sharing": "mig"}, "sharing"),
        ({"gpus": 1, "sharing": "mps"}, "sharing"),  # a whole GPU is never shared
        ({"gpus": 1, "gpu_milli": 500, "sharing": "mps", "vendor": "amd"}, "sharing"),
        ({"gpus": 1, "gpu_milli": 500, "mig_profile": "1g.10gb"}, "mig_profile"),
        ({"gpus": 1, "gpu_milli": 500, "tasks": 2}, "tasks"),
    ],
)
def test_a_spec_that_means_nothing_is_refused_naming_its_field(
    fields: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        JobSpec(("true",), **fields)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_a_share_runs_under_mps_on_nvidia_and_time_sliced_elsewhere() -> None:
    assert effective_sharing(None, "nvidia") == "mps"
    assert effective_sharing(None, "amd") == "timeslice"
    assert effective_sharing("timeslice", "nvidia") == "timeslice"


def test_sharing_fields_survive_the_record_codec_and_old_records_read_as_whole_gpus() -> None:
    spec = JobSpec(
        ("true",), gpus=1, gpu_milli=250, gpu_memory_bytes=10 * GIB, cpu_milli=1500,
        vendor="nvidia", sharing="mps",
    )  # fmt: skip
    assert decode_spec(encode_spec(spec)) == spec
    plain = encode_spec(JobSpec(("true",), gpus=2))
    assert "gpu_milli" not in plain  # records written before sharing stay byte-identical
    assert decode_spec(plain).gpu_milli == 1000


def _state() -> ClusterState:
    return ClusterState(Inventory((default_node(),), source="sim", simulated=True))


def test_memory_above_the_largest_gpu_and_an_absent_vendor_are_refused_at_submit() -> None:
    state = _state()
    largest = max(g.memory_bytes for g in default_node().gpus)
    too_big = JobSpec(("true",), gpus=1, gpu_milli=500, gpu_memory_bytes=largest + 1)
    with pytest.raises(InvalidRequest) as refused:
        state.apply(SubmitJob("j-1", too_big, 0.0))
    assert refused.value.field == "gpu_memory_bytes" and str(largest) in refused.value.reason
    with pytest.raises(InvalidRequest) as refused:
        state.apply(SubmitJob("j-2", JobSpec(("true",), gpus=1, vendor="amd"), 0.0))
    assert refused.value.field == "vendor"
    state.apply(SubmitJob("j-3", JobSpec(("true",), gpus=1, gpu_memory_bytes=largest), 0.0))
