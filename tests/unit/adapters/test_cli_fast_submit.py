"""`cli.fast` runs a plain `submit` without typer; it must send the same request and print
the same lines with the same exit code as the typer command, and hand anything else to typer
before sending anything. Both run against one recording HTTP server on loopback that answers
as the REST API does (201 with the job; 422 problem+json for a command named `refuse`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from gpu_platform.adapters.inbound.cli import CliHooks, build_cli
from gpu_platform.adapters.inbound.cli.fast import fast_submit
from gpu_platform.testing.recording_api import RecordingApi, recording_api


@pytest.fixture(scope="module")
def api() -> Iterator[RecordingApi]:
    with recording_api() as api:
        yield api


def via_typer(
    api: RecordingApi, argv: list[str], env: dict[str, str]
) -> tuple[int, str, str, list[Any]]:
    api.sent.clear()
    hooks = CliHooks(serve=lambda _: None, topology=lambda *_: "", simulate=lambda *_: "")
    result = CliRunner().invoke(build_cli(hooks), argv, env=env)
    return result.exit_code, result.stdout, result.stderr, list(api.sent)


def via_fast(
    api: RecordingApi, argv: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> tuple[int | None, str, str, list[Any]]:
    api.sent.clear()
    capsys.readouterr()
    code = fast_submit(argv, env)
    out, err = capsys.readouterr()
    return code, out, err, list(api.sent)


PLAIN = [
    ["submit", "--", "true"],
    ["submit", "-q", "sleep", "1"],
    ["submit", "--gpus", "2", "--tasks=4", "--name", "n 1", "-e", "A=1", "--env=B=2", "x"],
    ["--token", "t0k", "submit", "--priority", "7", "--no-preemptible", "--", "a", "--b"],
    ["submit", "--gpus", "0.25", "--gpu-memory", "10G", "--cpus", "1.5", "-o", "json", "x"],
    ["submit", "--after", "j-1", "--after", "j-2", "--gpu-model", "H100", "--mig", "1g.10gb", "x"],
    ["submit", "--nvlink", "required", "--numa=none", "--same-rack", "required", "x"],
    ["submit", "--image", "alpine", "--mount", "/a:/b:ro", "--memory", "4G", "x", "--", "y"],
    ["submit", "--time-limit", "01:30", "--max-attempts", "5", "--retry-backoff", "1.5", "x"],
    ["submit", "--tenant", "t", "--cwd", "/tmp", "--user", "u", "--output", "table", "x"],
    ["submit", "refuse"],  # the server's 422: one line on stderr, exit 6
]


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_a_plain_submit_sends_and_prints_what_the_typer_command_does(
    argv: list[str], api: RecordingApi, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"GPU_PLATFORM_SERVER": api.url}
    code, out, err, sent = via_fast(api, argv, env, capsys)
    assert code is not None, "the fast path took this call"
    assert len(sent) == 1 and (out or err)
    assert (code, out, err, sent) == via_typer(api, argv, env)


TYPER_ONLY = [
    ["submit", "--help"],
    ["submit"],
    ["submit", "--wait", "x"],
    ["submit", "--array", "0-3", "x"],
    ["submit", "--gpus", "abc", "x"],  # typer prints the error
    ["submit", "--env", "NOEQUALS", "x"],
    ["submit", "--tasks", "+3", "x"],
    ["submit", "--name", "a", "--name", "b", "x"],
    ["submit", "--name", "-x", "x"],
    ["submit", "--nvlink", "REQUIRED", "x"],
    ["submit", "-qe", "A=1", "x"],
    ["submit", "--gpu", "1", "x"],  # an abbreviation
    ["--server", "http://x", "submit", "x"],
    ["jobs", "list"],
    ["--install-completion"],
]


@pytest.mark.parametrize("argv", TYPER_ONLY, ids=" ".join)
def test_anything_else_is_left_to_typer_before_a_request_is_sent(
    argv: list[str], api: RecordingApi, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _, sent = via_fast(api, argv, {"GPU_PLATFORM_SERVER": api.url}, capsys)
    assert (code, sent) == (None, [])


def test_an_empty_token_variable_is_left_to_typer(
    api: RecordingApi, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"GPU_PLATFORM_SERVER": api.url, "GPU_PLATFORM_TOKEN": ""}
    assert via_fast(api, ["submit", "x"], env, capsys)[:1] == (None,)
