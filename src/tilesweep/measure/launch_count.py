"""Count torch's device launches per named part (aten ops that reach a kernel, views excepted)."""

from __future__ import annotations

from tilesweep import package_data

# The package data this module reads (rerun_keys.code_hash hashes it with the module).
DATA_FILES = ("data/launch_count.yaml",)
# aten ops that return a view or metadata and launch no kernel.
NO_LAUNCH = frozenset(package_data.data_mapping("tilesweep", DATA_FILES[0])["no_launch"])


def op_name(func) -> str:
    """Return an aten op's base name (`aten.mm.default` -> `mm`, `add_` stays `add_`)."""
    return func.__name__.split(".")[0]


def make_counter():
    """Return a new LaunchCounter (built lazily: torch is imported only when one is made)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class LaunchCounter(TorchDispatchMode):
        """Counts launches per part; `part` names the part the next ops belong to."""

        def __init__(self):
            super().__init__()
            self.part = "unnamed"
            self.counts: dict[str, int] = {}

        def add(self, n: int) -> None:
            """Count n launches made outside torch's dispatcher in the current part."""
            self.counts[self.part] = self.counts.get(self.part, 0) + n

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = op_name(func)
            if name not in NO_LAUNCH:
                self.add(1)
            return func(*args, **(kwargs or {}))

    return LaunchCounter()
