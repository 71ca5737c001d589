"""gpu-platform: a data-center GPU cluster manager (hexagonal core, pluggable adapters)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
