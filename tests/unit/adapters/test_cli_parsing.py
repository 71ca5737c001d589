from __future__ import annotations

import pytest

from gpu_platform.adapters.inbound.cli import app as cli


@pytest.mark.parametrize(
    ("text", "value"),
    [("1024", 1024), ("512M", 512 << 20), ("4G", 4 << 30), ("4GiB", 4 << 30), ("1.5k", 1536)],
)
def test_sizes_read_in_binary_units(text: str, value: int) -> None:
    assert cli.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "G", "4X", "-1G", "0"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--memory"):
        cli.parse_size(text)


@pytest.mark.parametrize(
    ("text", "value"), [("90", 90), ("01:30", 90), ("1:00:00", 3600), ("0.5", 0.5)]
)
def test_durations_read_as_seconds_or_clock_time(text: str, value: float) -> None:
    seconds = cli.parse_duration(text)
    assert seconds == value


@pytest.mark.parametrize(
    "text", ["", "a", "1:2:3:4", "0", "-5", "99:99:99", "1:60", "1:-30", "inf", "nan", "1:inf"]
)
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--time-limit"):
        cli.parse_duration(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("24h", 1_000_000 - 86400), ("-30m", 1_000_000 - 1800), ("7d", 1_000_000 - 7 * 86400),
     ("1970-01-02T00:00:00", 86400.0), ("1970-01-02T00:00:00+01:00", 82800.0)],
)  # fmt: skip
def test_usage_windows_read_spans_and_iso_times(text: str, value: float) -> None:
    assert cli.parse_when(text, now=1_000_000) == value


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(ValueError, match="24h"):
        cli.parse_when("yesterday", now=0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["drain", "--gpu", "node:x", "--server", "http://127.0.0.1:9"], "NODE:INDEX"),
        (["drain", "--server", "http://127.0.0.1:9"], "exactly one"),
        (
            ["offline", "--gpu", "n:1", "--node", "n", "--server", "http://127.0.0.1:9"],
            "exactly one",
        ),
    ],
)
def test_admin_commands_check_their_target_before_calling_the_server(
    args: list[str], message: str
) -> None:
    from typer.testing import CliRunner

    hooks = cli.CliHooks(serve=lambda _: None, topology=lambda *_: "")
    result = CliRunner().invoke(cli.build_cli(hooks), args)
    assert result.exit_code == 2  # usage error (docs/cli.md), nothing sent
    assert message in result.output


@pytest.mark.parametrize(
    ("flag", "value"),
    [([], None), (["--fault-injection"], True), (["--no-fault-injection"], False)],
)
def test_the_agent_s_fault_injection_flag_overrides_the_configuration_only_when_given(
    flag: list[str], value: bool | None
) -> None:
    from typer.testing import CliRunner

    seen: list[cli.AgentOptions] = []
    hooks = cli.CliHooks(serve=lambda _: None, topology=lambda *_: "", agent=seen.append)
    result = CliRunner().invoke(cli.build_cli(hooks), ["agent", "--servers", "h:1", *flag])
    assert result.exit_code == 0, result.output
    assert seen[0].fault_injection is value
