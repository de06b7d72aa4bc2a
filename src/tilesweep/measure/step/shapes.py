"""How the measured whole step divides its batch and memory over a layout's ranks."""

ELEMENT_BYTES = 2  # the measured step runs bf16 weights, activations and cache
# Share of the free device memory a batch's caches and buffers may take.
MEMORY_SHARE = 0.85


def local_sequences(batch: int, layout: dict) -> int:
    """Return the sequences one rank holds: the batch split over EP ranks (DP attention)."""
    return -(-batch // layout["ep"])


def micro_batches(batch: int, layout: dict) -> list[int]:
    """Return the sequences of each micro-batch on one rank: its sequences split into pp parts."""
    local, pp = local_sequences(batch, layout), layout["pp"]
    base, extra = divmod(local, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def emulated_rank(layout: dict) -> int:
    """Return the rank a one-rank emulation runs: the last stage's first rank."""
    return (layout["pp"] - 1) * layout["tp"] * layout["ep"]


def cache_bytes_per_sequence(model: dict, layout: dict, context_len: int, layers: int) -> int:
    """Return the KV-cache bytes one sequence takes on one rank over `layers` layers."""
    att = model["attention"]
    if att["kind"] == "mla":
        per_token = att["kv_lora_rank"] + att["qk_rope_head_dim"] + att.get("index_head_dim", 0)
    else:
        per_token = 2 * max(1, att["kv_heads"] // layout["tp"]) * att["head_dim"]
    return per_token * context_len * layers * ELEMENT_BYTES
