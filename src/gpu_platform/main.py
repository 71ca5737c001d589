"""Entry point: builds the CLI with the composition root's hooks (see infrastructure/)."""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    raise SystemExit("not wired yet")
