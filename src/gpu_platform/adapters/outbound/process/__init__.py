"""Runs job attempts as real processes."""

from gpu_platform.adapters.outbound.process.runner import ProcessJobRunner

__all__ = ["ProcessJobRunner"]
