"""One layer's feed-forward in the whole step: the dense FFN, or the MoE with EP dispatch."""

from tilesweep.measure.step.clock import PartClock


def ffn(rank, x, layer: dict, mb: dict, index: int, clock: PartClock):
    """Return the dense FFN or MoE output for x (before the TP all-reduce)."""
    torch, dist = rank.torch, rank.dist
    if layer["kind"] == "dense":
        with clock.part("dense_mlp"):
            return gated(rank, x @ layer["gate_up"].t(), clock) @ layer["down"].t()
    with clock.part("router"):
        logits = x @ layer["router"].t()
        if rank.fused:
            # triton (via kernels.step_fused): this module loads without it
            from tilesweep.kernels.step_fused import topk_softmax

            topk_softmax(torch, logits, rank.model["top_k"], mb["wflat"][: mb["top"]])
            clock.add_launches(1)
        else:
            top_w, _ = logits.topk(rank.model["top_k"], dim=1)
            mb["wflat"][: mb["top"]].copy_(torch.softmax(top_w.float(), dim=1).view(-1))
    fused = "fused" in mb
    out = None
    if fused and rank.layout["ep"] == 1:
        out = fused_experts(rank, x, layer, mb, clock)
    else:
        with clock.part("permute"):
            torch.index_select(x, 0, mb["perm"], out=mb["send"])
        if rank.ep_group is not None:
            with clock.part("dispatch"):
                dist.all_to_all_single(mb["recv"], mb["send"], group=rank.ep_group)
        if fused:
            fused_experts(rank, x, layer, mb, clock)
        else:
            p_gu, p_dn = mb["problems"][index]
            with clock.part("expert_gemms"):
                mb["run"](p_gu)
                gated(rank, mb["gu"], clock, out=mb["act"])
                mb["run"](p_dn)
        out = combine(rank, x, mb, clock)
    if "s_gate_up" in layer:
        with clock.part("shared_expert"):
            out.addmm_(gated(rank, x @ layer["s_gate_up"].t(), clock), layer["s_down"].t())
    return out


def gated(rank, gu, clock: PartClock, out=None):
    """Return silu(gate) x up of gu = [gate | up]: one fused kernel on a GPU, else torch."""
    torch = rank.torch
    if rank.fused:
        # triton (via kernels.step_fused): this module loads without it
        from tilesweep.kernels.step_fused import silu_and_mul

        clock.add_launches(1)
        return silu_and_mul(torch, gu, out=out)
    half = gu.shape[1] // 2
    silu = torch.nn.functional.silu
    if out is None:
        return silu(gu[:, :half]) * gu[:, half:]
    return torch.mul(silu(gu[:, :half]), gu[:, half:], out=out)


def fused_experts(rank, x, layer: dict, mb: dict, clock: PartClock):
    """Return the fused runner's expert output per token (EP: None, combined later)."""
    f = mb["fused"]
    ep1 = rank.layout["ep"] == 1
    a = x if ep1 else mb["recv"]
    with clock.part("expert_gemms"):
        f["invoke"](
            a, layer["e_gate_up"], mb["gu"], f["blocks"], f["config"], top_k=f["top_k"], gather=ep1
        )
        gated(rank, mb["gu"], clock, out=mb["act"])
        f["invoke"](
            mb["act"],
            layer["e_down"],
            mb["expert_out"],
            f["blocks"],
            f["config"],
            top_k=f["top_k"],
            gather=False,
            topk_weights=mb["wflat"][: f["pairs"]] if ep1 else None,
        )
        clock.add_launches(2)
    if ep1:
        with clock.part("combine_sum"):
            return mb["expert_out"][: f["pairs"]].view(x.shape[0], f["top_k"], -1).sum(1)
    return None


def combine(rank, x, mb: dict, clock: PartClock):
    """Return the routed rows brought back and summed per token by routing weight."""
    torch, dist = rank.torch, rank.dist
    if rank.ep_group is not None:
        with clock.part("combine"):
            dist.all_to_all_single(mb["back"], mb["expert_out"], group=rank.ep_group)
    with clock.part("combine_sum"):
        mb["back"].mul_(mb["wflat"][:, None])
        out = torch.zeros_like(x)
        out.index_add_(0, mb["perm"], mb["back"])
    return out
