"""One decode token's attention per sequence: MLA absorbed (DSA indexer where the model has one) or
GQA; with `fused`, the MLA core and DSA scores are one kernel each (kernels.mla_decode,
kernels.step_fused)."""

from tilesweep.measure.step.clock import PartClock


def rms(torch, x, w):
    """Return RMS-normalised x times w (torch's fused rms_norm, as engines fuse it)."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)


def kernels_label(a: dict, fused: bool) -> str:
    """Return what runs around the step's GEMMs (`step_kernels`) for this model."""
    mla, dsa = a["kind"] == "mla", bool(a.get("index_topk"))
    merged = "; projections sharing an input merged" if mla else ""
    if not fused:
        core = "torch bmm-softmax-bmm" if mla else "torch scaled_dot_product_attention"
        return f"torch ops ({core}{merged})"
    core = "triton mla_decode" if mla else "torch scaled_dot_product_attention"
    small = ["add_rms_norm"] + (["rms_norm"] if mla else []) + ["silu_and_mul", "topk_softmax"]
    small += ["index_scores"] if dsa else []
    return f"fused ({core}; triton {', '.join(small)}{merged})"


def attention(torch, a: dict, x, w: dict, cache: dict, clock: PartClock, fused: bool = False):
    """Return one decode token's attention output per sequence over its cache."""
    if a["kind"] == "mla":
        return _mla(torch, a, x, w, cache, clock, fused and x.is_cuda)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    n, hd = x.shape[0], a["head_dim"]
    kvh = cache["k"].shape[1]
    heads = w["qkv"].shape[0] // hd - 2 * kvh
    with clock.part("attn_proj"):
        qkv = (x @ w["qkv"].t()).view(n, heads + 2 * kvh, hd)
        cache["k"][:, :, -1].copy_(qkv[:, heads : heads + kvh])
        cache["v"][:, :, -1].copy_(qkv[:, heads + kvh :])
    with clock.part("attn_core"):
        out = sdpa(qkv[:, :heads].unsqueeze(2), cache["k"], cache["v"], enable_gqa=True)
    with clock.part("attn_out"):
        return out.reshape(n, heads * hd) @ w["o"].t()


def _split_cols(t, widths: dict, names: list[str]) -> dict:
    """Return {name: the column slice of t} for consecutive column blocks named in order."""
    out, at = {}, 0
    for name in names:
        out[name] = t[:, at : at + widths[name]]
        at += widths[name]
    return out


def _index_top(torch, a: dict, xa: dict, iq, cache: dict, clock: PartClock, fused: bool):
    """Return (the latent keys attention reads, the indexer's top-k token ids)."""
    n, keys = iq.shape[0], cache["lat"]
    cache["idx"][:, -1].copy_(xa["ik"])
    iq = iq.view(n, a["index_n_heads"], a["index_head_dim"])
    weights = xa["iw"]
    if fused:
        # triton (via kernels.step_fused): this module loads without it
        from tilesweep.kernels.step_fused import index_scores

        total = index_scores(torch, iq, cache["idx"], weights)
        clock.add_launches(1)
    else:
        scores = torch.relu(torch.einsum("nhd,ntd->nht", iq, cache["idx"]))
        total = (scores * weights.unsqueeze(-1)).sum(1)
    k = min(a["index_topk"], keys.shape[1])
    # Unsorted, as engines' top-k kernels: a sorted top-k adds 15-17 us a layer on an H200.
    top = total.topk(k, dim=-1, sorted=False).indices
    if not fused:
        keys = torch.gather(keys, 1, top.unsqueeze(-1).expand(-1, -1, keys.shape[-1]))
    return keys, top


def _mla(torch, a: dict, x, w: dict, cache: dict, clock: PartClock, fused: bool):
    """Return MLA's absorbed attention output (shared-input projections: one GEMM)."""
    n = x.shape[0]
    nope, rope, lat = a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["kv_lora_rank"]
    heads = w["uk"].shape[0]
    widths, dsa = w["widths"], "iq" in w["widths"]
    with clock.part("attn_proj"):
        xa = _split_cols(
            x @ w["x_proj"].t(), widths, ["q_a", "kv_a"] + (["ik", "iw"] if dsa else [])
        )
        if fused:
            # triton (via kernels.step_fused): this module loads without it
            from tilesweep.kernels.step_fused import rms_norm

            q_lat = rms_norm(torch, xa["q_a"], w["q_norm"])
            clock.add_launches(1)
        else:
            q_lat = rms(torch, xa["q_a"], w["q_norm"])
        qa = _split_cols(q_lat @ w["qlat_proj"].t(), widths, ["q_b"] + (["iq"] if dsa else []))
        q = qa["q_b"].view(n, heads, nope + rope)
        cache["lat"][:, -1].copy_(xa["kv_a"])  # this token's latent and rope key
        q_abs = torch.einsum("nhd,hdc->nhc", q[..., :nope], w["uk"])
        q_rope = q[..., nope:]
        # The fused kernel reads both parts where they lie; torch's bmm takes one query tensor.
        query = None if fused else torch.cat([q_abs, q_rope], dim=-1)
    keys, top = cache["lat"], None
    if dsa:
        with clock.part("attn_index"):
            keys, top = _index_top(torch, a, xa, qa["iq"], cache, clock, fused)
    scale = (nope + rope) ** -0.5
    if fused:
        # triton (via kernels.mla_decode): this module loads without it
        from tilesweep.kernels.mla_decode import mla_decode

        with clock.part("attn_core"):
            out = mla_decode(torch, q_abs, keys, lat, scale, indices=top, q_rope=q_rope)
            clock.add_launches(2)
    else:
        with clock.part("attn_core"):
            # One latent head shared by every query head: batched matmuls, no per-head copy.
            scores = torch.bmm(query, keys.transpose(1, 2)) * scale
            probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
            out = torch.bmm(probs, keys[..., :lat])
    with clock.part("attn_out"):
        o = torch.einsum("nhc,hcv->nhv", out, w["uv"]).reshape(n, -1)
        return o @ w["o"].t()
