from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.infrastructure.config import ConfigError, Settings, load_settings


def test_defaults_are_a_one_voter_cluster_with_its_own_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in ("HOST", "PORT", "DATA_DIR", "INVENTORY", "SERVER_ID", "PEERS", "LOCAL_AGENT"):
        monkeypatch.delenv(f"GPU_PLATFORM_{key}", raising=False)
    s = load_settings()
    assert (s.host, s.port, s.data_dir, s.inventory) == (
        "127.0.0.1",
        8080,
        Path(".gpu-platform"),
        "auto",
    )
    assert (s.server_id, s.peers, s.raft_port, s.local_agent) == (1, "", 7001, "auto")
    assert s.runs_local_agent


@pytest.mark.parametrize(
    ("overrides", "runs"),
    [
        ({}, True),
        ({"peers": "1=127.0.0.1:7001,2=127.0.0.1:7002"}, False),
        ({"peers": "1=127.0.0.1:7001", "local_agent": True}, True),  # the --local-agent flag
        ({"local_agent": "off"}, False),
        ({"local_agent": "false"}, False),
        ({"server_id": 0}, False),  # embedded: jobs run in the control plane itself
    ],
)
def test_who_runs_an_agent_in_process(
    monkeypatch: pytest.MonkeyPatch, overrides: dict[str, object], runs: bool
) -> None:
    for key in ("SERVER_ID", "PEERS", "LOCAL_AGENT"):
        monkeypatch.delenv(f"GPU_PLATFORM_{key}", raising=False)
    assert load_settings(**overrides).runs_local_agent is runs


def test_a_bad_local_agent_value_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="local_agent"):
        load_settings(local_agent="sometimes")


def test_flags_beat_environment_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "gp.toml"
    cfg.write_text('host = "0.0.0.0"\nport = 9000\ndata_dir = "/srv/gp"\nlog_level = "debug"\n')
    monkeypatch.setenv("GPU_PLATFORM_PORT", "9100")
    monkeypatch.setenv("GPU_PLATFORM_DATA_DIR", "/env/gp")
    s = load_settings(cfg, data_dir=Path("/flag/gp"), host=None)
    assert s.host == "0.0.0.0"  # file (no env, flag unset)
    assert s.port == 9100  # env over file
    assert s.data_dir == Path("/flag/gp")  # flag over env
    assert s.log_level == "debug"


def test_a_gpu_platform_table_in_the_file_is_read(tmp_path: Path) -> None:
    cfg = tmp_path / "gp.toml"
    cfg.write_text('[gpu_platform]\nshutdown_policy = "fail"\n')
    assert load_settings(cfg).shutdown_policy == "fail"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("port = 70000\n", "port"),
        ('log_format = "xml"\n', "log_format"),
        ("colour = 1\n", "colour"),
        ("port = \n", "invalid TOML"),
    ],
)
def test_bad_files_fail_naming_the_file_and_the_setting(
    tmp_path: Path, text: str, needle: str
) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert str(cfg) in str(err.value) and needle in str(err.value)


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml")


def test_a_bad_environment_value_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_PLATFORM_STOP_GRACE_SECONDS", "-1")
    with pytest.raises(ConfigError, match="stop_grace_seconds"):
        load_settings()


def test_every_setting_is_documented() -> None:
    for name, field in Settings.model_fields.items():
        assert field.description, f"setting {name} has no description"


def test_the_operations_guide_lists_every_setting() -> None:
    guide = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    for name in Settings.model_fields:
        assert f"`{name}`" in guide and f"`GPU_PLATFORM_{name.upper()}`" in guide, name
