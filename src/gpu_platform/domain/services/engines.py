"""Engine command lines: a replica's argv and health path from its engine, model and GPUs.

`custom` runs the user's command as given. The others are the engines' standard OpenAI-
compatible servers, with tensor parallelism over the replica's GPUs; `${PORT}` (the
service's `port_env`) is replaced by the port the agent picked when the replica starts:

- vllm:      vllm serve MODEL --host 0.0.0.0 --port ${PORT} --tensor-parallel-size G
- sglang:    python3 -m sglang.launch_server --model-path MODEL --host 0.0.0.0 --port ${PORT}
             --tp-size G
- llama.cpp: llama-server --model MODEL --alias MODEL --host 0.0.0.0 --port ${PORT}
             --n-gpu-layers 999 [--split-mode row] (llama.cpp splits by row over >1 GPUs)
- transformers: transformers serve MODEL --host 0.0.0.0 --port ${PORT} (Hugging Face's own
             server; no tensor parallelism, it places the model on the first visible GPU; a
             request's `model` must be MODEL as given, it serves that model alone)

Arguments the user gives after the engine (`command`) are appended. Every engine answers
`GET /health` with 200 once the model is loaded.
"""

from __future__ import annotations

from gpu_platform.domain.services.model import ServiceSpec

__all__ = ["HEALTH_PATHS", "engine_command", "replica_argv"]

HEALTH_PATHS = {
    "vllm": "/health",
    "sglang": "/health",
    "llama.cpp": "/health",
    "transformers": "/health",
}


def engine_command(
    engine: str, model: str, gpus: int, port_env: str = "PORT", extra: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The argv that serves `model` with `engine` on `gpus` GPUs (tensor parallel size =
    gpus, at least 1); `extra` is appended. Raises ValueError for `custom` or an unknown
    engine (a custom service brings its own command)."""
    port = "${" + port_env + "}"
    tp = str(max(gpus, 1))
    if engine == "vllm":
        argv = ["vllm", "serve", model, "--host", "0.0.0.0", "--port", port]
        argv += ["--tensor-parallel-size", tp]
    elif engine == "sglang":
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", model]
        argv += ["--host", "0.0.0.0", "--port", port, "--tp-size", tp]
    elif engine == "llama.cpp":
        argv = ["llama-server", "--model", model, "--alias", model]
        argv += ["--host", "0.0.0.0", "--port", port, "--n-gpu-layers", "999"]
        if gpus > 1:
            argv += ["--split-mode", "row"]
    elif engine == "transformers":
        argv = ["transformers", "serve", model, "--host", "0.0.0.0", "--port", port]
    else:
        raise ValueError(f"engine: no standard command line for {engine!r}")
    return (*argv, *extra)


def replica_argv(spec: ServiceSpec) -> tuple[str, ...]:
    """What one replica of `spec` runs: its engine's command line, or its own command."""
    if spec.engine == "custom":
        return spec.command
    return engine_command(spec.engine, spec.model, spec.gpus, spec.port_env, spec.command)
