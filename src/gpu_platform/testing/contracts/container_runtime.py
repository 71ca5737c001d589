"""The ContainerRuntime contract.

A `RuntimeKit` gives the suite a runtime, the name of an image present on it that has a
POSIX `sh` (the fake runs the argv on the host), and a unique `prefix` for container names
(the suite removes what it started). Every container here carries the label
`io.gpu-platform.contract=<prefix>` so that listings see only the suite's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

from gpu_platform.ports.outbound.container_runtime import (
    ContainerError,
    ContainerInfo,
    ContainerRuntime,
    ContainerSpec,
    ImageNotFound,
)

__all__ = ["ContainerRuntimeContract", "RuntimeKit"]

LABEL = "io.gpu-platform.contract"


@dataclass
class RuntimeKit:
    runtime: ContainerRuntime
    image: str
    prefix: str


class ContainerRuntimeContract:
    """Subclass and provide `kit`."""

    @pytest.fixture
    def kit(self) -> RuntimeKit:
        raise NotImplementedError

    @pytest.fixture
    def box(self, kit: RuntimeKit) -> Iterator[_Boxes]:
        boxes = _Boxes(kit)
        yield boxes
        for cid in boxes.started:
            kit.runtime.remove(cid)

    def test_a_container_reports_its_exit_code_and_output(self, box: _Boxes) -> None:
        cid = box.run("echo out-line; echo err-line >&2; exit 7")
        exit_ = box.kit.runtime.wait(cid)
        assert exit_.exit_code == 7
        assert not exit_.oom_killed
        output = b"".join(box.kit.runtime.logs(cid)).decode()
        assert "out-line" in output
        assert "err-line" in output

    def test_the_environment_is_the_one_given(self, box: _Boxes) -> None:
        cid = box.run(
            'echo "rank=$RANK mask=$CUDA_VISIBLE_DEVICES"', RANK="3", CUDA_VISIBLE_DEVICES="0,1"
        )
        assert box.kit.runtime.wait(cid).exit_code == 0
        assert "rank=3 mask=0,1" in b"".join(box.kit.runtime.logs(cid)).decode()

    def test_stop_ends_a_running_container_with_sigterm(self, box: _Boxes) -> None:
        cid = box.run("echo ready; exec sleep 600")
        next(iter(box.kit.runtime.logs(cid)))  # running (a PID 1 still starting ignores TERM)
        box.kit.runtime.stop(cid, grace_s=10)
        assert box.kit.runtime.wait(cid).exit_code == 128 + 15

    def test_stop_escalates_to_sigkill_after_the_grace(self, box: _Boxes) -> None:
        cid = box.run("trap '' TERM; echo ready; while :; do sleep 0.1; done")
        next(iter(box.kit.runtime.logs(cid)))  # the trap is set
        box.kit.runtime.stop(cid, grace_s=1)
        assert box.kit.runtime.wait(cid).exit_code == 128 + 9

    def test_kill_ends_a_running_container_with_sigkill(self, box: _Boxes) -> None:
        cid = box.run("exec sleep 600")
        box.kit.runtime.kill(cid)
        assert box.kit.runtime.wait(cid).exit_code == 128 + 9

    def test_stopping_or_killing_an_exited_container_is_no_error(self, box: _Boxes) -> None:
        cid = box.run("true")
        box.kit.runtime.wait(cid)
        box.kit.runtime.stop(cid, grace_s=1)
        box.kit.runtime.kill(cid)
        assert box.kit.runtime.wait(cid).exit_code == 0

    def test_an_image_the_node_lacks_is_image_not_found(self, box: _Boxes) -> None:
        with pytest.raises(ImageNotFound, match="no-such-image"):
            box.kit.runtime.run(box.spec("true", image="gpu-platform/no-such-image:0"))
        assert box.listed() == {}

    def test_a_program_the_image_lacks_fails_the_run(self, box: _Boxes) -> None:
        spec = box.spec("")
        with pytest.raises(ContainerError, match="no-such-program"):
            box.kit.runtime.run(replace(spec, argv=("/opt/no-such-program",)))
        with pytest.raises(ContainerError, match="no-such-program"):
            box.kit.runtime.run(replace(spec, argv=("no-such-program", "x")))
        assert box.listed() == {}

    def test_listing_finds_our_containers_by_label_running_or_not(self, box: _Boxes) -> None:
        runs = box.run("exec sleep 600", name="a")
        ends = box.run("true", name="b")
        box.kit.runtime.wait(ends)
        listed = box.listed()
        assert set(listed) == {runs, ends}
        assert listed[runs].running
        assert not listed[ends].running
        assert listed[runs].name == f"{box.kit.prefix}-a"
        assert listed[runs].labels[LABEL] == box.kit.prefix
        assert box.kit.runtime.list_ours({LABEL: box.kit.prefix + "-other"}) == []

    def test_remove_deletes_a_running_container_and_is_idempotent(self, box: _Boxes) -> None:
        cid = box.run("exec sleep 600")
        box.kit.runtime.remove(cid)
        box.kit.runtime.remove(cid)
        assert box.listed() == {}


class _Boxes:
    """Starts the suite's containers and remembers them for removal."""

    def __init__(self, kit: RuntimeKit) -> None:
        self.kit = kit
        self.started: list[str] = []
        self._n = 0

    def spec(
        self, script: str, image: str | None = None, name: str = "", **env: str
    ) -> ContainerSpec:
        self._n += 1
        return ContainerSpec(
            name=f"{self.kit.prefix}-{name or self._n}",
            image=image or self.kit.image,
            argv=("sh", "-c", script),
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", **env},
            labels={LABEL: self.kit.prefix},
        )

    def run(self, script: str, name: str = "", **env: str) -> str:
        cid = self.kit.runtime.run(self.spec(script, name=name, **env))
        self.started.append(cid)
        return cid

    def listed(self) -> dict[str, ContainerInfo]:
        return {c.id: c for c in self.kit.runtime.list_ours({LABEL: self.kit.prefix})}
