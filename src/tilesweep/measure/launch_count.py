"""Count the device launches of a region of torch code, per named part, on any device.

A `LaunchCounter` is a TorchDispatchMode: every aten op that reaches a backend kernel is one
launch, except the ops that only make a new view of existing memory (views, reshapes, slices,
transposes) and so launch nothing. On a GPU this is the number of kernels torch launches, up to
the few ops that launch two (a cuBLAS GEMM with a split-K reduction, a top-k); kernels launched
outside torch's dispatcher (Triton) are added by the caller with `add`.
"""

from __future__ import annotations

# aten ops that return a view or metadata and launch no kernel.
NO_LAUNCH = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "as_strided",
        "expand",
        "unsqueeze",
        "squeeze",
        "t",
        "transpose",
        "permute",
        "slice",
        "select",
        "narrow",
        "split",
        "split_with_sizes",
        "unbind",
        "detach",
        "alias",
        "lift_fresh",
        "empty",
        "empty_like",
        "empty_strided",
        "_reshape_alias",
        "unflatten",
        "flatten",
        "chunk",
        "diagonal",
        "view_as",
        "expand_as",
        "contiguous",  # a copy only when not contiguous; that copy is counted as copy_/clone
        "sym_size",
        "sym_stride",
        "sym_numel",
        "is_same_size",
        "_to_copy_noop",
        "item",
        "_local_scalar_dense",
        "record_stream",
        "set_",
    }
)


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
