"""Kernel sources: each backend's device code lives here, apart from how it is built or run."""
