"""skyd: run AI workloads on any infrastructure from one async daemon."""

__version__ = "0.1.0"

__all__ = ["__version__"]
