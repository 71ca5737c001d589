from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.infrastructure.config import ConfigError, Settings, load_settings


def test_defaults_are_the_embedded_single_node(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("HOST", "PORT", "DATA_DIR", "INVENTORY"):
        monkeypatch.delenv(f"GPU_PLATFORM_{key}", raising=False)
    s = load_settings()
    assert (s.host, s.port, s.data_dir, s.inventory) == (
        "127.0.0.1",
        8080,
        Path(".gpu-platform"),
        "auto",
    )


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
