"""Pieces of the gateway that need no server: usage read from an answer's end, and routes read
from a JSON file that changes under them."""

from __future__ import annotations

import json
from pathlib import Path

from gpu_platform.adapters.inbound.gateway.relay import usage_in
from gpu_platform.adapters.outbound.model_routes_file import (
    CombinedModelRoutes,
    JsonFileModelRoutes,
)
from gpu_platform.ports.inbound.model_routes import ReplicaAddress
from gpu_platform.testing.model_routes import StaticModelRoutes


def test_usage_is_read_from_a_json_body_and_from_the_last_streamed_event() -> None:
    body = b'{"choices":[],"usage":{"prompt_tokens":7,"total_tokens":12,"completion_tokens":5}}'
    assert usage_in(body) == (7, 5)
    stream = (
        b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,'
        b'"completion_tokens_details":{"reasoning_tokens":0}}}\n\ndata: [DONE]\n\n'
    )
    assert usage_in(stream) == (3, 1)


def test_no_usage_or_a_null_one_is_none() -> None:
    assert usage_in(b'data: {"choices":[],"usage":null}\n\ndata: [DONE]\n\n') is None
    assert usage_in(b'{"data":[]}') is None


def test_routes_follow_the_file_and_a_broken_file_keeps_the_last_good_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "routes.json"
    routes = JsonFileModelRoutes(path)
    assert routes.routes() == {}  # no file yet: no model
    static = StaticModelRoutes()
    static.set_model("m", "team", [ReplicaAddress("r1", "http://127.0.0.1:1")])
    static.write(path)
    assert routes.routes()["m"].replicas[0].url == "http://127.0.0.1:1"
    static.update_replica("m", "r1", draining=True)
    static.write(path)
    assert routes.routes()["m"].replicas[0].draining
    path.write_text(json.dumps({"models": [{"model": "x"}]}))  # no tenant
    assert routes.routes()["m"].replicas[0].draining


def test_combined_routes_merge_sources_and_the_first_wins_a_shared_name() -> None:
    first, second = StaticModelRoutes(), StaticModelRoutes()
    first.set_model("m", "a", [ReplicaAddress("r1", "http://one")])
    second.set_model("m", "b", [ReplicaAddress("r2", "http://two")])
    second.set_model("n", "b", [])
    combined = CombinedModelRoutes(first, second)
    assert combined.routes()["m"].tenant == "a" and set(combined.routes()) == {"m", "n"}
    assert CombinedModelRoutes(StaticModelRoutes(), second).routes() is second.routes()
