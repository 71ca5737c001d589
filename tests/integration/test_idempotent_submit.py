"""A submit carries an idempotency key (REST `Idempotency-Key`, gRPC `request_id`); the CLI
sets one and retries, so a retry after a lost answer never creates a job twice."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from gpu_platform.adapters.inbound.cli.client import ApiClient
from tests.integration.conftest import Server

BODY = {"command": ["true"], "gpus": 1, "name": "once"}


def named(server: Server, name: str) -> list[dict[str, object]]:
    return [j for j in server.get("/v1/jobs") if j["name"] == name]


def test_a_repeated_key_returns_the_first_job_and_a_reused_key_is_refused(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    key = {"Idempotency-Key": "4f1c2a9e-retry-1"}
    first = httpx.post(f"{server.url}/v1/jobs", json=BODY, headers=key, timeout=10)
    again = httpx.post(f"{server.url}/v1/jobs", json=BODY, headers=key, timeout=10)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert len(named(server, "once")) == 1

    other = dict(BODY, gpus=2)
    reused = httpx.post(f"{server.url}/v1/jobs", json=other, headers=key, timeout=10)
    assert reused.status_code == 409 and "different request" in reused.text

    bad = httpx.post(
        f"{server.url}/v1/jobs", json=BODY, headers={"Idempotency-Key": "no spaces"}, timeout=10
    )
    assert bad.status_code == 422 and "Idempotency-Key" in bad.text


def test_grpc_request_ids_deduplicate_like_the_rest_header(
    server_factory: Callable[..., Server],
) -> None:
    import grpc

    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc

    server = server_factory()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        jobs = pb_grpc.JobServiceStub(channel)
        req = pb.SubmitJobRequest(command=["true"], gpus=1, name="grpc-once", request_id="k-7")
        assert jobs.SubmitJob(req, timeout=10).id == jobs.SubmitJob(req, timeout=10).id
        with pytest.raises(grpc.RpcError) as bad:
            jobs.SubmitJob(pb.SubmitJobRequest(command=["true"], request_id="a b"), timeout=10)
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert len(named(server, "grpc-once")) == 1


def test_concurrent_grpc_submits_with_shared_keys_make_one_job_per_key(
    server_factory: Callable[..., Server],
) -> None:
    """40 gRPC submits at once, 32 of them over 8 keys: 8 jobs, each caller answered with its
    key's job; the 8 with an invalid key fail alone."""
    import grpc

    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
    from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc

    server = server_factory()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        jobs = pb_grpc.JobServiceStub(channel)

        def submit(i: int) -> str:
            key = f"k-{i % 8}" if i % 5 else "a b"  # every fifth call's key is invalid
            req = pb.SubmitJobRequest(command=["true"], name=f"together-{i % 8}", request_id=key)
            try:
                return str(jobs.SubmitJob(req, timeout=20).id)
            except grpc.RpcError as exc:
                return str(exc.code())

        with ThreadPoolExecutor(40) as pool:
            ids = list(pool.map(submit, range(40)))
    good = {i: ids[i] for i in range(40) if i % 5}
    assert [ids[i] for i in range(0, 40, 5)] == [str(grpc.StatusCode.INVALID_ARGUMENT)] * 8
    assert all(ids[i] == good[min(j for j in good if j % 8 == i % 8)] for i in good)
    assert len(set(good.values())) == 8
    for n in range(8):
        assert len(named(server, f"together-{n}")) == 1


class _LoseFirstAnswer(BaseHTTPRequestHandler):
    """Forwards each POST to the server, but drops the answer to the first one: the client
    cannot tell whether its job was created (what a timeout or a failover looks like)."""

    upstream = ""
    forwarded = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        answer = httpx.post(f"{self.upstream}{self.path}", content=body, headers=headers)
        with self.lock:
            type(self).forwarded += 1
            drop = type(self).forwarded == 1
        if drop:
            self.close_connection = True
            return
        self.send_response(answer.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def lossy_proxy(server_factory: Callable[..., Server]) -> Iterator[tuple[Server, str]]:
    server = server_factory()
    handler = type("Handler", (_LoseFirstAnswer,), {"upstream": server.url, "forwarded": 0})
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{proxy.server_address[1]}"
    proxy.shutdown()
    proxy.server_close()
    thread.join(timeout=5)


def test_the_client_retries_a_lost_answer_and_the_job_exists_once(
    lossy_proxy: tuple[Server, str],
) -> None:
    server, via = lossy_proxy
    job = ApiClient(via, timeout=10).submit(dict(BODY, name="retried"))
    (only,) = named(server, "retried")
    assert only["id"] == job["id"]


def test_without_a_key_the_same_lost_answer_would_have_made_two_jobs(
    lossy_proxy: tuple[Server, str],
) -> None:
    server, via = lossy_proxy
    client = ApiClient(via, timeout=10)
    with pytest.raises(Exception):  # noqa: B017 (the dropped answer: any transport error)
        client.request("POST", "/v1/jobs", json=dict(BODY, name="blind"))
    client.request("POST", "/v1/jobs", json=dict(BODY, name="blind"))
    assert len(named(server, "blind")) == 2
