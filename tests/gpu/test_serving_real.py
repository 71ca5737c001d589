"""A real serving engine on a real GPU: Hugging Face's `transformers serve` as a service's
replica (`--engine transformers`), on a tiny random Llama written here (no download), answering
the official `openai` client through the gateway, plain and streamed."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpu_platform.testing.cluster_procs import wait_until
from tests.gpu.conftest import smi

TINY = Path(__file__).with_name("tiny_model.py")


def test_a_transformers_replica_on_the_gpu_answers_the_openai_client_through_the_gateway(
    gpu_server: Any, torch_python: str, tmp_path: Path, seen: dict[str, Any]
) -> None:
    import openai

    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    if shutil.which("transformers", path=gpu_server.env["PATH"]) is None:
        pytest.skip("no `transformers` program on the server's PATH")
    model = tmp_path / "tiny-llama"
    subprocess.run([torch_python, str(TINY), str(model)], check=True, timeout=300)
    r = gpu_server.cli(
        "services", "create", "tiny", "--engine", "transformers", "--model", str(model),
        "--gpus", "1", "--startup-timeout", "300",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    service: dict[str, Any] = {}

    def ready() -> bool:
        nonlocal service
        service = gpu_server.get("/v1/services/tiny")
        return bool(service["ready"] == 1)

    try:
        assert wait_until(ready, timeout=300), service
        client = openai.OpenAI(
            base_url=f"{gpu_server.url}/v1", api_key="-", max_retries=0, timeout=120
        )
        chat = client.chat.completions.create(
            model=str(model), messages=[{"role": "user", "content": "hello"}], max_tokens=8
        )
        pieces = [
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model=str(model),
                messages=[{"role": "user", "content": "the quick brown fox"}],
                max_tokens=8,
                stream=True,
            )
            if c.choices
        ]
        apps = smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader")
        seen["serving"] = {
            "service": {k: service[k] for k in ("engine", "command", "ready", "gpus")},
            "replicas": service.get("replica_set"),
            "chat": chat.model_dump(),
            "stream_pieces": pieces,
            "compute_apps": apps.strip().splitlines(),
        }
        assert chat.choices[0].message.content
        assert chat.usage is not None and chat.usage.completion_tokens > 0
        assert "".join(pieces)
        assert apps.strip(), "no process on the GPU while the replica serves"
    finally:
        gpu_server.cli("services", "delete", "tiny")
        wait_until(lambda: gpu_server.get("/v1/services/tiny").get("detail") is not None, 60)
