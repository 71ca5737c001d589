"""Skips for tests that need a system tool — turned into failures in CI.

`require(ok, reason)` skips the calling test when `ok` is false, unless the environment sets
GPU_PLATFORM_REQUIRE_SYSTEM_TESTS=1 (as `.ci/run` does), in which case the test fails with the
same reason: CI must never pass by skipping what it was meant to check.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

__all__ = ["REQUIRE_ENV", "require", "require_shared", "require_tool", "shared_dir"]

REQUIRE_ENV = "GPU_PLATFORM_REQUIRE_SYSTEM_TESTS"


def require(ok: bool, reason: str) -> None:
    if ok:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1 forbids skipping)", pytrace=False)
    pytest.skip(reason)


def require_tool(name: str, package: str) -> str:
    """The path of executable `name`, or skip/fail naming the Debian `package` to install."""
    path = shutil.which(name)
    require(path is not None, f"{name} not found: install Debian package {package} (make deps)")
    assert path is not None
    return path


def shared_dir() -> Path | None:
    """The `shared/` data directory beside the checkout (or GPU_PLATFORM_SHARED), if present."""
    env = os.environ.get("GPU_PLATFORM_SHARED")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [p / "shared" for p in here.parents]
    for candidate in candidates:
        if (candidate / "DESIGN.md").is_file():
            return candidate
    return None


def require_shared(*parts: str) -> Path:
    """A path inside ../shared, or skip/fail when the shared data is absent (a user's clone)."""
    base = shared_dir()
    require(base is not None, "../shared (topologies, traces) is not beside this checkout")
    assert base is not None
    path = base.joinpath(*parts)
    require(path.exists(), f"{path} is missing from ../shared")
    return path
