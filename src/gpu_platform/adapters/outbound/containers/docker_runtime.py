"""DockerContainerRuntime: the ContainerRuntime port over the Docker Engine API (`docker` SDK).

Works with any daemon that speaks the Engine API (dockerd, podman's compatible socket).
Images are never pulled implicitly unless `pull=True`: a node without the image fails the
launch with ImageNotFound at once (a registry that cannot be reached fails the pull fast too).
Containers share the host's network (gang rendezvous on the node's address) and get GPUs
either as NVIDIA device requests (the container toolkit / CDI, when the daemon has it) or as
plain device nodes (AMD, Intel) chosen by the caller.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from gpu_platform.ports.outbound.container_runtime import (
    ContainerError,
    ContainerExit,
    ContainerInfo,
    ContainerSpec,
    ImageNotFound,
)

__all__ = ["DockerContainerRuntime", "docker_available"]


def docker_available(base_url: str | None = None) -> bool:
    """True when a daemon answers a ping at `base_url` (default: DOCKER_HOST or the socket)."""
    try:
        runtime = DockerContainerRuntime(base_url)
    except ContainerError:
        return False
    runtime.close()
    return True


class DockerContainerRuntime:
    """Implements ContainerRuntime with the `docker` SDK's low-level APIClient. Thread-safe
    (one HTTP connection pool); raises ContainerError when the daemon does not answer."""

    name = "docker"

    def __init__(self, base_url: str | None = None, *, pull: bool = False) -> None:
        try:
            import docker
            import docker.errors
        except ImportError as exc:  # pragma: no cover - the extra is not installed
            raise ContainerError(
                "the docker SDK is missing: pip install 'gpu-platform[containers]'"
            ) from exc
        self._errors = docker.errors
        self._types = docker.types
        try:
            url = base_url or docker.utils.kwargs_from_env().get("base_url")
            self._api = docker.APIClient(base_url=url, version="auto", timeout=60)
            self._api.ping()
            # waits and log streams may be quiet for hours: no read timeout on those
            self._streams = docker.APIClient(base_url=url, version="auto", timeout=None)
        except Exception as exc:
            raise ContainerError(
                f"no container daemon at {base_url or 'DOCKER_HOST'}: {exc}"
            ) from exc
        self._pull = pull
        info = self._api.info()
        self.nvidia = "nvidia" in (info.get("Runtimes") or {})  # the container toolkit is set up

    def close(self) -> None:
        self._api.close()
        self._streams.close()

    def run(self, spec: ContainerSpec) -> str:
        api, types = self._api, self._types
        host_config = api.create_host_config(
            network_mode="host",
            mounts=[
                types.Mount(m.target, m.source, type="bind", read_only=m.read_only)
                for m in spec.mounts
            ],
            devices=[f"{d}:{d}:rwm" for d in spec.devices],
            device_requests=[
                types.DeviceRequest(
                    driver=spec.gpus.driver,
                    device_ids=list(spec.gpus.device_ids),
                    capabilities=[["gpu"]],
                )
            ]
            if spec.gpus is not None
            else None,
            mem_limit=spec.memory_bytes,
            memswap_limit=spec.memory_bytes,  # no swap beyond the cap: the limit is the limit
            cpuset_cpus=",".join(map(str, spec.cpus)) or None,
            cpuset_mems=",".join(map(str, spec.mems)) or None,
            pids_limit=spec.pids_max,
            init=True,  # a PID 1 that forwards SIGTERM and reaps: stop behaves like a process's
        )
        try:
            created = self._create(spec, host_config)
        except self._errors.ImageNotFound as exc:
            raise ImageNotFound(f"image {spec.image!r} is not on this node: {_why(exc)}") from exc
        except self._errors.APIError as exc:
            raise ContainerError(
                f"cannot create container for {spec.image!r}: {_why(exc)}"
            ) from exc
        cid = str(created["Id"])
        try:
            self._require_program(cid, spec)
            api.start(cid)
        except self._errors.APIError as exc:
            self.remove(cid)
            raise ContainerError(
                f"cannot start {spec.argv[0]!r} in {spec.image!r}: {_why(exc)}"
            ) from exc
        return cid

    def _require_program(self, cid: str, spec: ContainerSpec) -> None:
        """argv[0] must be in the image (on its PATH): the init process would only report a
        failed exec as exit 127 once started, so look first and fail the launch instead."""
        program = spec.argv[0]
        if "/" in program:
            candidates = [program]
        else:
            path = spec.env.get("PATH") or self._image_path(spec.image)
            candidates = [
                f"{d.rstrip('/')}/{program}" for d in path.split(":") if d.startswith("/")
            ]
        for candidate in candidates:
            try:
                self._api.get_archive(cid, candidate)[0].close()
                return
            except self._errors.NotFound:
                continue
        self.remove(cid)
        raise ContainerError(f"program {program!r} not found in image {spec.image!r}")

    def _image_path(self, image: str) -> str:
        env = self._api.inspect_image(image)["Config"].get("Env") or []
        found = [e.partition("=")[2] for e in env if e.startswith("PATH=")]
        return found[0] if found else "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def _create(self, spec: ContainerSpec, host_config: dict[str, Any]) -> dict[str, Any]:
        def create() -> dict[str, Any]:
            return self._api.create_container(  # type: ignore[no-any-return]
                spec.image,
                command=list(spec.argv),
                name=spec.name,
                environment=dict(spec.env),
                labels=dict(spec.labels),
                user=spec.user or "",
                working_dir=spec.workdir,
                host_config=host_config,
                detach=True,
            )

        try:
            return create()
        except self._errors.ImageNotFound:
            if not self._pull:
                raise
        try:
            self._api.pull(spec.image)
        except self._errors.APIError as exc:
            raise ImageNotFound(f"image {spec.image!r}: pull failed: {_why(exc)}") from exc
        return create()

    def wait(self, container_id: str) -> ContainerExit:
        try:
            status = self._streams.wait(container_id)
            state = self._api.inspect_container(container_id)["State"]
        except self._errors.NotFound as exc:
            raise ContainerError(f"container {container_id[:12]} is gone") from exc
        return ContainerExit(int(status["StatusCode"]), bool(state.get("OOMKilled")))

    def logs(self, container_id: str) -> Iterator[bytes]:
        try:
            stream = self._streams.logs(container_id, stream=True, follow=True)
        except self._errors.NotFound:
            return
        yield from stream

    def stop(self, container_id: str, grace_s: float) -> None:
        with contextlib.suppress(self._errors.NotFound):
            self._api.stop(container_id, timeout=max(0, round(grace_s)))

    def kill(self, container_id: str) -> None:
        with contextlib.suppress(self._errors.NotFound, self._errors.APIError):
            self._api.kill(container_id)  # APIError 409: it is not running (any more)

    def remove(self, container_id: str) -> None:
        try:
            self._api.remove_container(container_id, force=True)
        except self._errors.APIError as exc:  # 404: gone; 409: removal already in progress
            if exc.status_code not in (404, 409):
                raise ContainerError(f"cannot remove {container_id[:12]}: {_why(exc)}") from exc

    def list_ours(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        found = self._api.containers(
            all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]}
        )
        return [
            ContainerInfo(
                id=c["Id"],
                name=(c.get("Names") or ["/?"])[0].lstrip("/"),
                labels=dict(c.get("Labels") or {}),
                running=c.get("State") == "running",
            )
            for c in found
        ]


def _why(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)
