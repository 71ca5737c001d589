"""FakeContainerRuntime: the ContainerRuntime port with host processes standing in for containers.

A "container" is the argv run as a host process in its own process group, with only the
spec's environment (and the host's PATH when the spec gives none): enough to exercise
everything the platform does with containers (exit codes, signals, logs, labels, stop, kill,
reconciliation) where no daemon runs. Images are names in `images`; any other is
ImageNotFound. Limits, mounts and devices are recorded, not enforced (`specs` keeps them).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial

from gpu_platform.ports.outbound.container_runtime import (
    ContainerError,
    ContainerExit,
    ContainerInfo,
    ContainerSpec,
    ImageNotFound,
)

__all__ = ["FakeContainerRuntime"]


@dataclass
class _Box:
    spec: ContainerSpec
    proc: subprocess.Popen[bytes]
    output: bytearray = field(default_factory=bytearray)
    done: bool = False


class FakeContainerRuntime:
    """Implements ContainerRuntime with subprocesses. Thread-safe."""

    name = "fake"

    def __init__(self, images: tuple[str, ...] = ("fake/python:3",)) -> None:
        self.images = set(images)
        self.specs: list[ContainerSpec] = []  # every spec run, in order
        self._boxes: dict[str, _Box] = {}
        self._ids = itertools.count(1)
        self._cond = threading.Condition()

    def run(self, spec: ContainerSpec) -> str:
        if spec.image not in self.images:
            raise ImageNotFound(f"image {spec.image!r} is not on this node")
        with self._cond:
            if any(b.spec.name == spec.name for b in self._boxes.values()):
                raise ContainerError(f"a container named {spec.name!r} exists")
        env = dict(spec.env)
        env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        try:
            proc = subprocess.Popen(
                list(spec.argv),
                env=env,
                cwd=spec.workdir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise ContainerError(f"cannot start {spec.argv[0]!r}: {exc.strerror}") from exc
        cid = f"fake{next(self._ids):012d}"
        box = _Box(spec, proc)
        with self._cond:
            self._boxes[cid] = box
            self.specs.append(spec)
        threading.Thread(target=self._pump, args=(box,), daemon=True).start()
        return cid

    def _pump(self, box: _Box) -> None:
        assert box.proc.stdout is not None
        with box.proc.stdout as out:
            while chunk := out.read1(65536):  # type: ignore[attr-defined]
                with self._cond:
                    box.output += chunk
                    self._cond.notify_all()
        box.proc.wait()
        with _gone():
            os.killpg(box.proc.pid, signal.SIGKILL)  # like a container: nothing outlives PID 1
        with self._cond:
            box.done = True
            self._cond.notify_all()

    def _box(self, container_id: str) -> _Box:
        with self._cond:
            box = self._boxes.get(container_id)
        if box is None:
            raise ContainerError(f"container {container_id} is gone")
        return box

    def wait(self, container_id: str) -> ContainerExit:
        box = self._box(container_id)
        with self._cond:
            self._cond.wait_for(lambda: box.done)
        code = box.proc.returncode
        return ContainerExit(128 - code if code < 0 else code)

    def logs(self, container_id: str) -> Iterator[bytes]:
        box = self._box(container_id)
        sent = 0
        while True:
            with self._cond:
                self._cond.wait_for(partial(_moved, box, sent))
                chunk, finished = bytes(box.output[sent:]), box.done
            sent += len(chunk)
            if chunk:
                yield chunk
            if finished and sent == len(box.output):
                return

    def stop(self, container_id: str, grace_s: float) -> None:
        with self._cond:
            box = self._boxes.get(container_id)
        if box is None or box.done:
            return
        with _gone():
            os.killpg(box.proc.pid, signal.SIGTERM)
        with self._cond:
            if self._cond.wait_for(lambda: box.done, timeout=grace_s):
                return
        self.kill(container_id)
        with self._cond:
            self._cond.wait_for(lambda: box.done)

    def kill(self, container_id: str) -> None:
        with self._cond:
            box = self._boxes.get(container_id)
        if box is not None and not box.done:
            with _gone():
                os.killpg(box.proc.pid, signal.SIGKILL)

    def remove(self, container_id: str) -> None:
        self.kill(container_id)
        with self._cond:
            box = self._boxes.get(container_id)
            if box is None:
                return
            self._cond.wait_for(lambda: box.done)
            self._boxes.pop(container_id, None)  # another remover may have been first

    def list_ours(self, labels: Mapping[str, str]) -> list[ContainerInfo]:
        with self._cond:
            return [
                ContainerInfo(cid, b.spec.name, dict(b.spec.labels), not b.done)
                for cid, b in self._boxes.items()
                if all(b.spec.labels.get(k) == v for k, v in labels.items())
            ]

    def close(self) -> None:
        """Nothing to release (containers stay, as with a daemon): see `remove_all`."""

    def remove_all(self) -> None:
        """Kill and remove every container (test teardown)."""
        with self._cond:
            ids = list(self._boxes)
        for cid in ids:
            self.remove(cid)


def _moved(box: _Box, sent: int) -> bool:
    return box.done or len(box.output) > sent


def _gone() -> contextlib.suppress:
    """Signalling a process group that has already ended is no error."""
    return contextlib.suppress(ProcessLookupError, PermissionError)
