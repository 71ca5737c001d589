"""A Docker daemon, a base image and the platform's image for tests, on a machine with no registry.

- `docker_daemon()` yields the address of a daemon: DOCKER_HOST's or the system socket's when
  one answers, else one it starts itself (`dockerd --iptables=false --bridge=none`, root
  only; storage driver overlay2, else vfs where overlayfs cannot mount: vfs copies every
  layer whole, several times slower to build) with its data root in the cache (image layers
  survive between runs) and its sockets in a temporary directory; it is stopped on exit.
- `base_image(api)` imports `gpu-platform-base:bookworm`: a `debootstrap --variant=minbase`
  of Debian bookworm with python3 from the configured Debian mirror, as a tarball cached
  under the cache directory (built once, minutes; imported in seconds).
- `platform_image(api, repo)` builds the top-level Dockerfile FROM that base, offline: the
  dependencies come from a wheelhouse built here with pip (cached per dependency list).

Cache: $GPU_PLATFORM_CACHE or ~/.cache/gpu-platform, subdirectory containers/.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "BASE_IMAGE",
    "DaemonUnavailable",
    "base_image",
    "cache_dir",
    "debian_mirror",
    "docker_daemon",
    "platform_image",
]

BASE_IMAGE = "gpu-platform-base:bookworm"
_PACKAGES = "python3,python3-venv,ca-certificates"
_TRIM = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/locale", "usr/share/man")


class DaemonUnavailable(Exception):
    """No daemon answers and none can be started here (the message says why)."""


def cache_dir() -> Path:
    root = os.environ.get("GPU_PLATFORM_CACHE") or Path.home() / ".cache" / "gpu-platform"
    path = Path(root) / "containers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _ping(address: str) -> bool:
    import docker

    try:
        client = docker.APIClient(base_url=address, timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextlib.contextmanager
def docker_daemon() -> Iterator[str]:
    """The address of a daemon that answers (see the module docstring)."""
    for address in (os.environ.get("DOCKER_HOST"), "unix:///var/run/docker.sock"):
        if address and _ping(address):
            yield address
            return
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise DaemonUnavailable("dockerd not found: install Debian package docker.io (make deps)")
    if os.geteuid() != 0:
        raise DaemonUnavailable("no Docker daemon answers and starting one needs root")
    errors = []
    for driver in ("overlay2", "vfs"):
        try:
            with _own_daemon(dockerd, driver) as address:
                yield address
                return
        except DaemonUnavailable as exc:
            errors.append(str(exc))
    raise DaemonUnavailable("\n".join(errors))


@contextlib.contextmanager
def _own_daemon(dockerd: str, driver: str) -> Iterator[str]:
    data_root = cache_dir() / f"dockerd-{driver}"
    with tempfile.TemporaryDirectory(prefix="gp-dockerd-", dir="/tmp") as run:
        sock = f"unix://{run}/docker.sock"
        log_path = Path(run) / "dockerd.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    dockerd,
                    f"--storage-driver={driver}",
                    "--iptables=false",
                    "--ip6tables=false",
                    "--bridge=none",
                    f"--data-root={data_root}",
                    f"--exec-root={run}/exec",
                    f"--pidfile={run}/dockerd.pid",
                    f"--host={sock}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + 60
            while not _ping(sock):
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-1500:]
                    raise DaemonUnavailable(f"dockerd ({driver}) did not come up:\n{tail}")
                time.sleep(0.2)
        except BaseException:
            _stop_daemon(proc)
            _unmount_under(Path(run))
            raise
        try:
            yield sock
        finally:
            _stop_daemon(proc)
            _unmount_under(Path(run))  # dockerd leaves exec/netns/default mounted


def _stop_daemon(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM dockerd (it stops its containerd and containers), SIGKILL its group if stuck."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The first Debian archive URI in apt's sources (one-line or deb822), else deb.debian.org."""
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for match in re.finditer(r"^(?:deb\s+(?:\[[^]]*]\s+)?|URIs:\s*)(\S+)", text, re.M):
            uri = match.group(1)
            if uri.rstrip("/").endswith("/debian"):
                return uri
    return "http://deb.debian.org/debian"


def _rootfs_tarball() -> Path:
    """The cached base root filesystem; made with debootstrap when missing (root only)."""
    tarball = cache_dir() / f"debian-bookworm-{_PACKAGES.replace(',', '-')}.tar"
    if tarball.exists():
        return tarball
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise DaemonUnavailable("debootstrap not found: install Debian package debootstrap")
    if os.geteuid() != 0:
        raise DaemonUnavailable("debootstrap needs root to build the base image")
    with tempfile.TemporaryDirectory(prefix="gp-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        try:
            subprocess.run(
                [
                    debootstrap,
                    "--variant=minbase",
                    f"--include={_PACKAGES}",
                    "bookworm",
                    str(root),
                    debian_mirror(),
                ],
                check=True,
                capture_output=True,
                timeout=1800,
            )
        finally:
            _unmount_under(root)  # an interrupted debootstrap leaves /proc mounted inside
        for part in _TRIM:
            for child in (root / part).glob("*"):
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
    return tarball


def _unmount_under(root: Path) -> None:
    """Lazily unmount every mount below `root`, deepest first."""
    prefix = str(root.resolve()) + "/"
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return
    points = [line.split()[1] for line in lines if len(line.split()) > 1]
    for point in sorted((p for p in points if p.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def base_image(api: Any) -> str:
    """Make sure BASE_IMAGE is in the daemon (`api`: a docker.APIClient); return its name."""
    if api.images(name=BASE_IMAGE):
        return BASE_IMAGE
    with _rootfs_tarball().open("rb") as tar:
        api.import_image_from_data(tar, repository=BASE_IMAGE.partition(":")[0], tag="bookworm")
    return BASE_IMAGE


def _wheelhouse(repo: Path) -> Path:
    """Wheels of the project's dependencies (and the build's setuptools), cached per list."""
    deps = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = [*deps, "setuptools>=68", "wheel"]
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:16]
    house = cache_dir() / f"wheelhouse-{key}"
    if not house.exists():
        partial = house.with_name(house.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(partial), *wanted],
            check=True,
            capture_output=True,
            timeout=900,
        )
        partial.rename(house)
    return house


def platform_image(api: Any, repo: Path, tag: str = "gpu-platform:test") -> str:
    """Build the repository's Dockerfile FROM the base image, offline; return `tag`."""
    base = base_image(api)
    house = _wheelhouse(repo)
    with tempfile.TemporaryDirectory(prefix="gp-context-") as tmp:
        context = Path(tmp)
        for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
            shutil.copy2(repo / name, context / name)
        shutil.copytree(repo / "src", context / "src", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(house, context / "wheelhouse")
        for line in api.build(
            path=str(context),
            tag=tag,
            buildargs={"BASE_IMAGE": base},
            network_mode="host",
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in line:
                raise RuntimeError(f"docker build failed: {line['error']}")
    return tag
