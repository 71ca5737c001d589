"""The test model server answers the OpenAI HTTP API as a real process, deterministically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from gpu_platform.testing.model_server import (
    ModelServerProcess,
    completion_tokens,
    spawn_model_server,
)


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServerProcess]:
    process = spawn_model_server("tiny", "other", replica_id="solo")
    yield process
    process.stop()


def test_health_and_models_list_every_model_it_was_given(server: ModelServerProcess) -> None:
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/health").status_code == 200
        ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert ids == ["tiny", "other"]


def test_the_same_prompt_gets_the_same_tokens_and_usage_counts_them(
    server: ModelServerProcess,
) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 5}
    with httpx.Client(base_url=server.url) as client:
        first = client.post("/v1/chat/completions", json=body).json()
        second = client.post("/v1/chat/completions", json=body).json()
    text = first["choices"][0]["message"]["content"]
    assert text == second["choices"][0]["message"]["content"]
    assert text == "".join(completion_tokens("a b c", 5))
    assert first["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert first["system_fingerprint"] == "solo"


def test_a_stream_ends_with_a_usage_chunk_and_done_when_usage_is_asked_for(
    server: ModelServerProcess,
) -> None:
    body = {
        "model": "tiny",
        "prompt": "x",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with (
        httpx.Client(base_url=server.url) as client,
        client.stream("POST", "/v1/completions", json=body) as response,
    ):
        assert response.headers["content-type"] == "text/event-stream"
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == "".join(
        completion_tokens("x", 3)
    )
    assert chunks[-1]["usage"]["completion_tokens"] == 3


def test_unknown_model_and_malformed_json_get_openai_shaped_errors(
    server: ModelServerProcess,
) -> None:
    with httpx.Client(base_url=server.url) as client:
        missing = client.post("/v1/embeddings", json={"model": "nope", "input": "a"})
        broken = client.post("/v1/embeddings", content=b"{not json")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "bad_json"


def test_port_env_names_the_variable_that_holds_the_port() -> None:
    argv = [sys.executable, "-m", "gpu_platform.testing.model_server", "--model", "m"]
    refused = subprocess.run(
        [*argv, "--port-env", "MODEL_PORT"],
        env={**os.environ, "MODEL_PORT": "x"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert refused.returncode != 0 and "MODEL_PORT" in refused.stderr
