"""A real Docker daemon for these tests: the running one, or one started here and stopped after
(gpu_platform.testing.docker_host). The base image is debootstrapped once and cached; the
platform's image is built from the top-level Dockerfile. Skips with the reason where no
daemon can be had, except under GPU_PLATFORM_REQUIRE_SYSTEM_TESTS=1 (then it fails)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_platform.testing.docker_host import (
    DaemonUnavailable,
    base_image,
    docker_daemon,
    platform_image,
)
from gpu_platform.testing.system import require

REPO = Path(__file__).resolve().parents[2]
# The first test pays for the session's fixtures: a debootstrap and an image build (minutes).
SESSION_TIMEOUT_S = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.timeout(SESSION_TIMEOUT_S))


@pytest.fixture(scope="session")
def docker_address() -> Iterator[str]:
    try:
        import docker  # noqa: F401
    except ImportError:
        require(False, "the docker SDK is missing: pip install -e '.[dev]'")
    with contextlib.ExitStack() as stack:
        try:
            address = stack.enter_context(docker_daemon())
        except DaemonUnavailable as exc:
            require(False, f"no Docker daemon: {exc}")
            raise
        yield address


@pytest.fixture(scope="session")
def docker_api(docker_address: str) -> Iterator[Any]:
    import docker

    api = docker.APIClient(base_url=docker_address, version="auto", timeout=120)
    yield api
    api.close()


@pytest.fixture(scope="session")
def base(docker_api: Any) -> str:
    """An image with sh and python3 (Debian bookworm minbase), imported from the cache."""
    try:
        return base_image(docker_api)
    except DaemonUnavailable as exc:
        require(False, f"no base image: {exc}")
        raise


@pytest.fixture(scope="session")
def platform(docker_api: Any, base: str) -> str:
    """The project's image, built from the Dockerfile FROM `base`, offline."""
    return platform_image(docker_api, REPO)
