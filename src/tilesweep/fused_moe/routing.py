"""The kernel's host-side routing: pairs sorted by expert and padded, or a block per pair."""


def align_blocks(topk_ids, block_m: int, experts: int, expert_map=None):
    """Return (sorted_ids, expert_ids, num_post_pad); `expert_map`: global to local (-1)."""
    import torch

    flat = topk_ids.reshape(-1).to(torch.int64)
    pairs, device = flat.numel(), flat.device
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(padded, 0) - padded
    firsts = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    by_expert = flat[order]
    rank = torch.arange(pairs, device=device) - firsts[by_expert]
    total = int(padded.sum().item())
    sorted_ids = torch.full((total,), pairs, dtype=torch.int32, device=device)
    sorted_ids[starts[by_expert] + rank] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(torch.arange(experts, device=device), padded // block_m)
    if expert_map is not None:
        expert_ids = expert_map.to(device)[expert_ids]
    num_post_pad = torch.tensor([total], dtype=torch.int32, device=device)
    return sorted_ids, expert_ids.to(torch.int32), num_post_pad


def buffered_blocks(topk_ids, block_m: int, experts: int, size: int):
    """Return align_blocks' layout in an engine's buffers of `size` rows."""
    import torch

    sorted_ids, expert_ids, post_pad = align_blocks(topk_ids, block_m, experts)
    device = sorted_ids.device
    padded = torch.full((size,), topk_ids.numel(), dtype=torch.int32, device=device)
    padded[: sorted_ids.numel()] = sorted_ids
    blocks = (size + block_m - 1) // block_m
    ids = torch.full((blocks,), -1, dtype=torch.int32, device=device)
    ids[: expert_ids.numel()] = expert_ids
    return padded, ids, post_pad


def direct_blocks(topk_ids, block_m: int, expert_map=None):
    """Return (sorted_ids, expert_ids, num_post_pad) with one row block per routed pair."""
    import torch

    flat = topk_ids.reshape(-1).to(torch.int64)
    pairs, device = flat.numel(), flat.device
    sorted_ids = torch.full((pairs, block_m), pairs, dtype=torch.int32, device=device)
    sorted_ids[:, 0] = torch.arange(pairs, dtype=torch.int32, device=device)
    expert_ids = flat if expert_map is None else expert_map.to(device)[flat]
    num_post_pad = torch.tensor([pairs * block_m], dtype=torch.int32, device=device)
    return sorted_ids.reshape(-1), expert_ids.to(torch.int32), num_post_pad
