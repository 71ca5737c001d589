"""Where a process's cluster token comes from, and who must be given one."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpu_platform.adapters.cluster_identity import cluster_id, same_cluster
from gpu_platform.infrastructure.cluster_token import cluster_token
from gpu_platform.infrastructure.config import ConfigError, Settings

SECRET = "gpc_0123456789abcdef0123"


def test_a_one_voter_server_creates_its_token_once_readable_only_by_its_user(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path)
    first = cluster_token(settings, server=True)
    assert first.startswith("gpc_") and len(first) > 20
    path = tmp_path / "cluster-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert cluster_token(settings, server=True) == first  # read back, not made again


def test_the_setting_wins_over_the_file_and_a_file_can_be_named(tmp_path: Path) -> None:
    (tmp_path / "cluster-token").write_text("gpc_from_the_data_dir_file\n")
    assert cluster_token(Settings(data_dir=tmp_path, cluster_token=SECRET), server=False) == SECRET
    named = tmp_path / "shared-token"
    named.write_text(f"  {SECRET}\n")
    settings = Settings(data_dir=tmp_path / "agent", cluster_token_file=named)
    assert cluster_token(settings, server=False) == SECRET


@pytest.mark.parametrize(
    ("server", "extra"),
    [(False, {}), (True, {"peers": "1=127.0.0.1:7001,2=127.0.0.1:7002"}), (True, {"join": True})],
)
def test_agents_and_servers_with_peers_are_refused_without_a_token(
    tmp_path: Path, server: bool, extra: dict[str, object]
) -> None:
    settings = Settings(data_dir=tmp_path, **extra)
    with pytest.raises(ConfigError, match="needs this cluster's token"):
        cluster_token(settings, server=server)
    assert not (tmp_path / "cluster-token").exists()


def test_an_empty_or_missing_token_file_is_refused_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        cluster_token(Settings(data_dir=tmp_path, cluster_token_file=empty), server=False)
    with pytest.raises(ConfigError, match="cannot read"):
        cluster_token(
            Settings(data_dir=tmp_path, cluster_token_file=tmp_path / "absent"), server=False
        )


def test_tokens_compare_exactly_and_the_cluster_id_does_not_reveal_the_token() -> None:
    assert same_cluster(SECRET, SECRET)
    assert not same_cluster(SECRET, SECRET + "x")
    assert not same_cluster(SECRET, None) and not same_cluster(SECRET, "")
    assert cluster_id(SECRET).startswith("c-") and SECRET not in cluster_id(SECRET)
