"""Every command and Python snippet in README.md and docs/*.md runs (issue 19, item 5).

Fenced blocks tagged `bash`, `sh`, `shell`, `console` or `python` are extracted and executed:

- `python`: written to a file and run by a fresh interpreter (`python FILE`) in an empty
  directory; a block that defines a pytest class (`class Test...`) is run by pytest instead.
- `bash`/`sh`/`shell`: run by `bash -e -o pipefail` in an empty directory laid out like a
  checkout after `make run` (`.venv/bin/activate` and `.venv/bin/gpu-platform` there, and
  `../shared` when the real one exists), with `gpu-platform` on PATH and
  `GPU_PLATFORM_SERVER` pointing to a server this module starts (free ports, a temporary data
  directory) the first time a block needs it. `console`: the lines starting
  with `$ ` are the commands; the rest is output and is not checked.

Each must exit 0 within `TIMEOUT_S`. A block that cannot run here (a long-running server, root,
a GPU, another host) says so in the doc, on the line right before its fence:

    <!-- doc-test: skip (the reason) -->

A failure names the block as FILE:LINE (the line of its opening fence).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_platform.testing.system import shared_dir
from tests.integration.conftest import Server

ROOT = Path(__file__).resolve().parents[2]
LANGS = {"bash", "sh", "shell", "console", "python"}
FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")
SKIP = re.compile(r"^<!--\s*doc-test:\s*skip\s*\((.+)\)\s*-->\s*$")
TIMEOUT_S = 300  # CLI calls take seconds each on a loaded 2-core machine


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None  # the reason given in the doc, if any

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def needs_server(self) -> bool:
        return self.lang != "python"  # curl blocks need it too


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        lang = m.group(1).lower()
        if lang in LANGS:
            before = lines[i - 1] if i > 0 else ""
            skip = SKIP.match(before.strip())
            code = "\n".join(lines[i + 1 : end]) + "\n"
            yield Block(path, i + 1, lang, code, skip.group(1) if skip else None)
        i = end + 1


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


ALL = [b for f in doc_files() if f.exists() for b in blocks(f)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One `gpu-platform serve` for every shell block (started on first use)."""
    root = tmp_path_factory.mktemp("doc-server")
    served = Server(root / "data")
    served.start()
    try:
        yield served
    finally:
        served.stop()


def shell_script(block: Block) -> str:
    if block.lang != "console":
        return block.code
    return "".join(line[2:] + "\n" for line in block.code.splitlines() if line.startswith("$ "))


def environment(server: Server | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    if server is not None:
        env.update(server.env)
        env["GPU_PLATFORM_SERVER"] = server.url
    return env


def checkout_like(base: Path) -> Path:
    """A directory a shell block can run in as if in the checkout after `make run`."""
    repo = base / "repo"
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    cli = bin_dir / "gpu-platform"
    cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpu_platform.main "$@"\n')
    cli.chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "activate").write_text(f'PATH="{bin_dir}:$PATH"; export PATH\n')
    shared = shared_dir()  # ../shared beside the checkout, or GPU_PLATFORM_SHARED
    if shared is not None:
        (base / "shared").symlink_to(shared)
    return repo


def run(block: Block, workdir: Path, server: Server | None) -> subprocess.CompletedProcess[str]:
    env = environment(server)
    if block.lang != "python":
        workdir = checkout_like(workdir)
        env["PATH"] = f"{workdir / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
    if block.lang == "python":
        script = workdir / ("test_doc_block.py" if "class Test" in block.code else "block.py")
        script.write_text(block.code)
        argv = [sys.executable, str(script)]
        if script.name.startswith("test_"):
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
    else:
        script = workdir / "block.sh"
        script.write_text(shell_script(block))
        argv = ["bash", "-e", "-x", "-o", "pipefail", str(script)]  # -x: failures show the line
    return subprocess.run(
        argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


@pytest.mark.timeout(TIMEOUT_S + 120)
@pytest.mark.parametrize("block", ALL, ids=[b.where for b in ALL])
def test_the_documented_block_runs(
    block: Block, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if block.skip is not None:
        pytest.skip(f"{block.where}: {block.skip}")
    server = request.getfixturevalue("server") if block.needs_server else None
    try:
        done = run(block, tmp_path, server)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(
            f"{block.where}: ```{block.lang} block ran over {TIMEOUT_S}s\n"
            f"--- stderr (tail)\n{(err or '')[-1500:]}",
            pytrace=False,
        )
    if done.returncode != 0:
        pytest.fail(
            f"{block.where}: ```{block.lang} block exited {done.returncode}\n"
            f"--- stdout (tail)\n{done.stdout[-1500:]}\n--- stderr (tail)\n{done.stderr[-1500:]}",
            pytrace=False,
        )


def test_every_skip_marker_gives_a_reason_and_sits_on_a_runnable_block() -> None:
    for path in doc_files():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "doc-test:" not in line:
                continue
            assert SKIP.match(line.strip()), f"{path.relative_to(ROOT)}:{i + 1}: malformed marker"
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            m = FENCE.match(nxt)
            assert m and m.group(1).lower() in LANGS, (
                f"{path.relative_to(ROOT)}:{i + 1}: a skip marker must be right before a "
                f"```bash/sh/shell/console/python fence"
            )


def test_the_harness_finds_blocks_and_names_their_lines(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "text\n```python\nprint(1)\n```\n<!-- doc-test: skip (needs a GPU) -->\n```bash\nnvidia-smi\n```\n"
        "```text\nnot run\n```\n"
    )
    found = list(blocks(doc))
    assert [(b.line, b.lang, b.skip) for b in found] == [
        (2, "python", None),
        (6, "bash", "needs a GPU"),
    ]
    failing = Block(doc, 2, "python", "raise SystemExit(3)\n", None)
    assert run(failing, tmp_path, None).returncode == 3
