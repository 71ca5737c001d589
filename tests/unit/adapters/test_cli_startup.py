"""The CLI's cost per call is its imports (issue 19 item 10): `--help` and client commands
load the CLI and an HTTP client, never the server's stack (gRPC, FastAPI, uvicorn, the
composition root). The time itself is a benchmark (tests/benchmarks/bench_cli.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpu_platform.testing.recording_api import recording_api

# pydantic itself is allowed: typer (>= 0.25) builds its parameter coercion with it; our
# pydantic models live in the REST adapter, listed below.
# Runs the real entry point, then reports which modules the call had loaded.
PROBE = """
import json, sys
from gpu_platform.main import main
sys.argv = ["gpu-platform", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
sys.__stderr__.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""

SERVER_SIDE = (
    "grpc",
    "fastapi",
    "uvicorn",
    "dependency_injector",
    "gpu_platform.infrastructure",
    "gpu_platform.adapters.outbound",
    "gpu_platform.adapters.inbound.grpc",
    "gpu_platform.adapters.inbound.rest",
    "gpu_platform.application",
)


def loaded_modules(*args: str, env: dict[str, str] | None = None) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def server_side(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in SERVER_SIDE))


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("jobs", "--help"),
        ("submit", "--help"),
        ("jobs", "list", "--server", "http://127.0.0.1:9"),  # refused: exit 3, same imports
        ("status", "--server", "http://127.0.0.1:9"),
    ],
    ids=" ".join,
)
def test_client_commands_and_help_do_not_import_the_server_stack(args: tuple[str, ...]) -> None:
    modules = loaded_modules(*args)
    assert "gpu_platform.adapters.inbound.cli.app" in modules  # the probe really ran the CLI
    assert server_side(modules) == []


def test_help_does_not_import_httpx() -> None:
    assert "httpx" not in loaded_modules("--help")


def test_a_client_command_talks_through_the_standard_library_not_httpx() -> None:
    modules = loaded_modules("jobs", "list", "--server", "http://127.0.0.1:9")
    assert "http.client" in modules  # the probe sees what the command loaded
    assert "httpx" not in modules


def test_help_and_a_listing_load_no_domain_package() -> None:
    """The domain package costs ~25 ms of imports; only commands that need it load it."""
    for args in (("--help",), ("jobs", "list", "--server", "http://127.0.0.1:9")):
        assert not [m for m in loaded_modules(*args) if m.startswith("gpu_platform.domain")], args


# What a plain `submit` must not load: typer's parsing and its pydantic coercion, rich, the
# domain package (~170 ms of CPU together; cli.fast parses the call instead).
HEAVY_FOR_SUBMIT = ("typer", "click", "pydantic", "pydantic_core", "rich", "gpu_platform.domain")


def test_a_plain_submit_loads_neither_typer_pydantic_rich_nor_the_domain() -> None:
    with recording_api() as api:
        modules = loaded_modules(
            "submit", "--gpus", "1", "-e", "A=1", "--", "true", env={"GPU_PLATFORM_SERVER": api.url}
        )
        assert len(api.sent) == 1  # the probe really submitted
    assert "gpu_platform.adapters.inbound.cli.fast" in modules
    heavy = [m for m in modules if any(m == p or m.startswith(p + ".") for p in HEAVY_FOR_SUBMIT)]
    assert heavy == []
    assert server_side(modules) == []


def test_a_submit_the_fast_path_leaves_to_typer_still_runs_typer() -> None:
    with recording_api() as api:
        modules = loaded_modules(
            "submit", "--gpus", "abc", "--", "true", env={"GPU_PLATFORM_SERVER": api.url}
        )
        assert api.sent == []  # refused before sending
    assert "typer" in modules
