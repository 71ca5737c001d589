"""Services in the domain: engine command lines, the table's commands, and the controller's
restart, backoff and health rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_platform.domain.cluster_codec import decode_state, encode_state
from gpu_platform.domain.cluster_state import ClusterState
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.job import Allocation, Job, JobState
from gpu_platform.domain.services.commands import (
    CreateService,
    EndReplica,
    LaunchReplica,
    ReportReplicaHealth,
    ScaleService,
)
from gpu_platform.domain.services.engines import HEALTH_PATHS, engine_command, replica_argv
from gpu_platform.domain.services.model import ReplicaState, ServiceSpec, backoff_s
from gpu_platform.domain.services.reconcile import (
    StopReplicaJob,
    SubmitReplicaJob,
    reconcile,
    replica_job_spec,
    replica_state,
)
from gpu_platform.domain.services.table import ServiceTable

# -- engines -------------------------------------------------------------------------------


def test_vllm_serves_the_model_with_tensor_parallelism_over_the_replicas_gpus() -> None:
    argv = engine_command("vllm", "meta-llama/Llama-3.1-8B", 4)
    assert argv == (
        "vllm", "serve", "meta-llama/Llama-3.1-8B", "--host", "0.0.0.0", "--port", "${PORT}",
        "--tensor-parallel-size", "4",
    )  # fmt: skip


def test_sglang_uses_its_launch_server_with_tp_size() -> None:
    argv = engine_command("sglang", "Qwen/Qwen2-7B", 2, port_env="SVC_PORT")
    assert argv == (
        "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2-7B",
        "--host", "0.0.0.0", "--port", "${SVC_PORT}", "--tp-size", "2",
    )  # fmt: skip


def test_llama_cpp_offloads_every_layer_and_splits_rows_only_over_several_gpus() -> None:
    one = engine_command("llama.cpp", "/models/tiny.gguf", 1)
    assert one == (
        "llama-server", "--model", "/models/tiny.gguf", "--alias", "/models/tiny.gguf",
        "--host", "0.0.0.0", "--port", "${PORT}", "--n-gpu-layers", "999",
    )  # fmt: skip
    assert engine_command("llama.cpp", "m.gguf", 2)[-2:] == ("--split-mode", "row")


def test_transformers_runs_hugging_faces_own_server_on_the_model_as_given() -> None:
    argv = engine_command("transformers", "/models/tiny-llama", 1, extra=("--device", "cuda"))
    assert argv == (
        "transformers", "serve", "/models/tiny-llama", "--host", "0.0.0.0", "--port", "${PORT}",
        "--device", "cuda",
    )  # fmt: skip
    assert HEALTH_PATHS["transformers"] == "/health"


def test_a_cpu_only_engine_replica_still_asks_for_tensor_parallel_size_one() -> None:
    assert engine_command("vllm", "m", 0)[-1] == "1"


def test_extra_arguments_follow_the_engine_command_and_custom_runs_as_given() -> None:
    spec = ServiceSpec("m", ("--max-model-len", "4096"), engine="vllm", model="m", gpus=1)
    assert replica_argv(spec)[-2:] == ("--max-model-len", "4096")
    custom = ServiceSpec("c", ("python3", "srv.py"))
    assert replica_argv(custom) == ("python3", "srv.py")
    with pytest.raises(ValueError, match="engine"):
        engine_command("custom", "m", 1)


# -- the table -----------------------------------------------------------------------------


def spec(**kw: object) -> ServiceSpec:
    base = ServiceSpec("web", ("srv",), replicas=2, backoff_s=2.0, max_backoff_s=10.0)
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"replicas": -1}, "replicas"),
        ({"port_env": "1PORT"}, "port_env"),
        ({"health_path": "health"}, "health_path"),
        ({"engine": "tgi"}, "engine"),
        ({"engine": "vllm", "model": ""}, "model"),
        ({"command": ()}, "command"),
        ({"backoff_s": 0.0}, "backoff_s"),
        ({"gpu_milli": 0}, "gpu_milli"),
        ({"gpu_milli": 500, "gpus": 2}, "gpus"),
        ({"gpu_milli": 500, "gpus": 1, "gpu_memory_bytes": 0}, "gpu_memory_bytes"),
        # a replica job could never carry it (schemathesis created one; its rounds failed)
        ({"gpus": 0, "gpu_memory_bytes": 30}, "gpu_memory_bytes"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        ServiceTable().apply(CreateService(spec(**change), 0.0))
    assert err.value.field == field


def test_a_replica_of_a_half_gpu_service_asks_for_a_share_of_one_gpu() -> None:
    table = ServiceTable()
    table.apply(CreateService(spec(gpus=1, gpu_milli=500, gpu_memory_bytes=1 << 30), 0.0))
    service = table.get("web")
    job = replica_job_spec(service, "web-1", 0)
    assert (job.gpus, job.gpu_milli, job.gpu_memory_bytes) == (1, 500, 1 << 30)


def test_names_are_unique_and_unknown_services_are_not_found() -> None:
    table = ServiceTable()
    table.apply(CreateService(spec(), 0.0))
    with pytest.raises(Conflict):
        table.apply(CreateService(spec(), 1.0))
    with pytest.raises(NotFound):
        table.apply(ScaleService("nope", 1, 1.0))


def test_backoff_doubles_per_consecutive_failure_up_to_its_cap() -> None:
    s = spec()
    assert [backoff_s(s, k) for k in range(6)] == [0.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def running(job_id: str, epoch: int, at: float = 0.0) -> Job:
    job = Job(job_id, replace_spec(), JobState.RUNNING, 0.0, started_at=at)
    return replace(job, allocation=Allocation("n1", (0,), ("G0",), epoch))


def replace_spec():  # type: ignore[no-untyped-def]
    from gpu_platform.domain.model.job import JobSpec

    return JobSpec(("srv",))


def launched(table: ServiceTable, now: float = 0.0) -> dict[str, Job]:
    """Reconcile a new service once; its replicas' jobs run (epochs 1, 2, ...)."""
    jobs: dict[str, Job] = {}
    for action in reconcile(table.get("web"), jobs.get, now):
        if isinstance(action, SubmitReplicaJob):
            jobs[action.job_id] = running(action.job_id, len(jobs) + 1, now)
        elif not isinstance(action, StopReplicaJob):
            table.apply(action)
    return jobs


def test_a_crashed_replica_waits_out_its_backoff_before_it_restarts_under_a_new_job() -> None:
    table = ServiceTable()
    table.apply(CreateService(spec(replicas=1), 0.0))
    jobs = launched(table)
    (job_id,) = jobs
    jobs[job_id] = replace(jobs[job_id], state=JobState.FAILED, exit_code=3)
    for action in reconcile(table.get("web"), jobs.get, 10.0):
        assert not isinstance(action, LaunchReplica)  # not in the same round
        if isinstance(action, EndReplica):
            table.apply(action)
    (replica,) = table.get("web").replicas
    assert replica_state(replica, None) is ReplicaState.BACKOFF
    assert "exit code 3" in replica.detail
    assert replica.not_before == 12.0  # first failure: backoff_s
    assert reconcile(table.get("web"), jobs.get, 11.9) == []
    actions = reconcile(table.get("web"), jobs.get, 12.0)
    launch = next(a for a in actions if isinstance(a, LaunchReplica))
    assert launch.replica_id == replica.replica_id and launch.job_id != job_id
    table.apply(launch)
    assert table.get("web").replicas[0].restarts == 1


def test_a_replica_that_never_becomes_ready_is_stopped_saying_why() -> None:
    table = ServiceTable()
    table.apply(CreateService(spec(replicas=1, startup_timeout_s=30.0), 0.0))
    jobs = launched(table)
    (job_id,) = jobs
    table.apply(ReportReplicaHealth(job_id, 1, False, "http://h:1", "GET /health: HTTP 503", 1.0))
    assert reconcile(table.get("web"), jobs.get, 29.0) == []
    (stop,) = reconcile(table.get("web"), jobs.get, 30.0)
    assert isinstance(stop, StopReplicaJob) and "HTTP 503" in stop.reason


def test_a_ready_replica_failing_its_checks_is_unhealthy_then_restarted() -> None:
    table = ServiceTable()
    table.apply(CreateService(spec(replicas=1, unhealthy_timeout_s=5.0), 0.0))
    jobs = launched(table)
    (job_id,) = jobs
    table.apply(ReportReplicaHealth(job_id, 1, True, "http://h:1", "", 1.0))
    table.apply(ReportReplicaHealth(job_id, 1, False, "http://h:1", "refused", 2.0))
    replica = table.get("web").replicas[0]
    assert replica_state(replica, jobs[job_id]) is ReplicaState.UNHEALTHY
    assert reconcile(table.get("web"), jobs.get, 6.9) == []
    assert isinstance(reconcile(table.get("web"), jobs.get, 7.0)[0], StopReplicaJob)


def test_a_report_for_an_older_attempt_changes_nothing_and_a_new_attempt_is_not_ready() -> None:
    table = ServiceTable()
    table.apply(CreateService(spec(replicas=1), 0.0))
    jobs = launched(table)
    (job_id,) = jobs
    table.apply(ReportReplicaHealth(job_id, 1, True, "http://h:1", "", 1.0))
    jobs[job_id] = running(job_id, 7)  # its node was lost: the job runs again elsewhere
    assert replica_state(table.get("web").replicas[0], jobs[job_id]) is ReplicaState.STARTING
    table.apply(ReportReplicaHealth(job_id, 7, True, "http://h:2", "", 2.0))
    table.apply(ReportReplicaHealth(job_id, 1, False, "http://h:1", "late", 3.0))
    replica = table.get("web").replicas[0]
    assert replica.address == "http://h:2"
    assert replica_state(replica, jobs[job_id]) is ReplicaState.READY


def test_services_survive_a_snapshot_of_the_cluster_state_exactly() -> None:
    state = ClusterState.empty()
    state.apply(CreateService(spec(env=(("A", "1"),)), 5.0))
    jobs = launched(state.services)
    job_id = next(iter(jobs))
    state.apply(ReportReplicaHealth(job_id, 1, True, "http://h:1", "", 6.0))
    record = encode_state(state)
    again = decode_state(record, FaultPolicy())
    assert again.services.services() == state.services.services()
    assert encode_state(again) == record
