"""Settings: every knob typed and documented; sources in priority order

    explicit overrides (CLI flags) > environment (GPU_PLATFORM_*) > TOML file (--config) > defaults

Settings are built in `main()`, never at import time. Unknown keys in the TOML file are errors.

The fields live in the bases of `Settings`, by concern: `config_node` (the server and its
node), `config_replication`, `config_api` (APIs, security, the gateway); this module adds the
sources and the checks across settings.
"""

from __future__ import annotations

import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from gpu_platform.infrastructure.config_api import ApiSettings
from gpu_platform.infrastructure.config_node import NodeSettings
from gpu_platform.infrastructure.config_replication import ReplicationSettings

__all__ = ["ConfigError", "Settings", "fence_budget_s", "load_settings"]

_toml_data: ContextVar[dict[str, Any] | None] = ContextVar("gpu_platform_toml", default=None)


def fence_budget_s(*, lease_s: float, grace_s: float, suspect_s: float, election_s: float) -> float:
    """The least `node_down_after_seconds` that keeps fencing safe (see
    `Settings.fence_budget_seconds`): lease + fence grace + one election timeout (the old
    leader's renewal window) + slack (suspect period / 3 + 1 s), rounded to milliseconds."""
    return round(lease_s + grace_s + election_s + suspect_s / 3 + 1.0, 3)


class ConfigError(Exception):
    """The configuration is invalid; the message names the file and/or the setting."""


class Settings(ApiSettings, ReplicationSettings, NodeSettings):
    """gpu-platform configuration. Environment variables are `GPU_PLATFORM_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="GPU_PLATFORM_", extra="forbid")

    @model_validator(mode="after")
    def _timing_budget(self) -> Settings:
        """Node loss must not re-run work before a cut-off agent has stopped it (fencing)."""
        if self.node_down_after_seconds <= self.node_suspect_after_seconds:
            raise ValueError(
                f"node_down_after_seconds ({self.node_down_after_seconds:g}) must exceed "
                f"node_suspect_after_seconds ({self.node_suspect_after_seconds:g})"
            )
        if self.node_suspect_after_seconds <= self.agent_heartbeat_seconds:
            raise ValueError(
                f"node_suspect_after_seconds ({self.node_suspect_after_seconds:g}) must exceed "
                f"agent_heartbeat_seconds ({self.agent_heartbeat_seconds:g})"
            )
        need = self.fence_budget_seconds
        if self.server_id != 0 and self.node_down_after_seconds < need:
            raise ValueError(
                f"node_down_after_seconds ({self.node_down_after_seconds:g}) must be at least "
                f"{need:g}: agent_lease_seconds + agent_fence_grace_seconds + "
                "node_suspect_after_seconds/3 + 1 s + one election timeout "
                "(raft_tick_seconds x raft_election_ticks), or a cut-off agent's tasks could "
                "still run when their jobs start elsewhere"
            )
        return self

    @property
    def fence_budget_seconds(self) -> float:
        """The least node_down_after_seconds that keeps fencing safe (docs/replication.md).

        A newer leader re-places a silent node's work `node_down_after_seconds` after it took
        the lead; the old leader renews leases only while a quorum was in its term within one
        election timeout (`application.raft_contact`), so its last lease ends at most one
        election timeout + `agent_lease_seconds` after the newer leader took the lead, and the
        fence has stopped the tasks `agent_fence_grace_seconds` later. The rest is slack:
        the verdicts' cadence (a third of the suspect period), timers and scheduling (1 s)."""
        return fence_budget_s(
            lease_s=self.agent_lease_seconds,
            grace_s=self.agent_fence_grace_seconds,
            suspect_s=self.node_suspect_after_seconds,
            election_s=self.lease_renewal_window_seconds,
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = InitSettingsSource(settings_cls, init_kwargs=_toml_data.get() or {})
        return (init_settings, env_settings, toml)


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from overrides, environment and an optional TOML file.

    `overrides` whose value is None are ignored (an unset CLI flag). Raises ConfigError.
    """
    data: dict[str, Any] = {}
    if config_file is not None:
        path = Path(config_file)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path}: not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: invalid TOML: {exc}") from None
        data = data.get("gpu_platform", data)
    token = _toml_data.set(data)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        where = f"config file {config_file}" if config_file else "configuration"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '?'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"{where}: {problems}") from None
    finally:
        _toml_data.reset(token)
