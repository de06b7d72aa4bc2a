"""The brief's hand estimate of a tile's shared memory, kept as a `model` beside the compiler."""

# Bytes per operand element, and bytes of block scale per element (one FP8 scale per 16).
_ELEMENT_BYTES = {"nvfp4": 0.5, "fp8": 1.0, "bf16": 2.0}
_SCALE_BYTES = {"nvfp4": 1 / 16, "fp8": 0.0, "bf16": 0.0}
_OUT_BYTES = {"default": 2, "finalize": 4}


def hand_estimate(
    dtype: str, tile_m: int, tile_n: int, tile_k: int, stages: int | str, epilogue: str
) -> int:
    """Return the brief's estimate in bytes: stages x (A + B tiles and scales) + epilogue staging
    (`auto` keeps the brief's single stage)."""
    per_elem = _ELEMENT_BYTES[dtype] + _SCALE_BYTES[dtype]
    mainloop = (tile_m * tile_k + tile_k * tile_n) * per_elem
    count = stages if isinstance(stages, int) else 1
    epilogue_bytes = tile_m * tile_n * _OUT_BYTES[epilogue]
    return int(count * mainloop + epilogue_bytes)
