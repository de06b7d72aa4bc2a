"""One rank's share of the reduced model's weights: random bf16, sharded over TP and EP."""


def random_bf16(torch, shape: tuple, device, gen, scale: float = 1.0):
    """Return a bf16 tensor of this shape, tiled random values (cheap for GBs of weights) times
    scale (empty shapes allowed)."""
    out = torch.empty(*shape, dtype=torch.bfloat16, device=device)
    flat, block = out.view(-1), min(out.numel(), 1 << 20)
    if block:
        base = (torch.randn(block, generator=gen) * scale).to(out.dtype).to(out.device)
        for lo in range(0, flat.numel(), block):
            flat[lo : lo + block].copy_(base[: min(block, flat.numel() - lo)])
    return out


class WeightMaker:
    """Makes a rank's weights from its own generator or the one all ranks share."""

    def __init__(self, torch, device, gen, shared_gen):
        self.torch, self.device, self.gen, self.shared_gen = torch, device, gen, shared_gen

    def w(self, *shape, k: int, shared: bool = False):
        """Return a bf16 weight of this shape, random with scale 1/sqrt(k)."""
        source = self.shared_gen if shared else self.gen
        return random_bf16(self.torch, shape, self.device, source, k**-0.5)

    def ones(self, n: int):
        """Return a bf16 vector of n ones (a norm's weight)."""
        return self.torch.ones(n, dtype=self.torch.bfloat16, device=self.device)


def attention_weights(make: WeightMaker, model: dict, tp: int) -> dict:
    """Return one layer's attention weights on a rank, shared-input projections merged."""
    a, hidden = model["attention"], model["hidden"]
    heads = max(1, a["heads"] // tp)
    if a["kind"] == "mla":
        nope, rope, lat = a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["kv_lora_rank"]
        ql = a["q_lora_rank"]
        x_rows = {"q_a": ql, "kv_a": lat + rope}
        q_rows = {"q_b": heads * (nope + rope)}
        if a.get("index_topk"):
            x_rows.update({"ik": a["index_head_dim"], "iw": a["index_n_heads"]})
            q_rows["iq"] = a["index_n_heads"] * a["index_head_dim"]
        return {
            "x_proj": make.w(sum(x_rows.values()), hidden, k=hidden),
            "q_norm": make.ones(ql),
            "qlat_proj": make.w(sum(q_rows.values()), ql, k=ql),
            "uk": make.w(heads, nope, lat, k=nope),
            "uv": make.w(heads, lat, a["v_head_dim"], k=lat),
            "o": make.w(hidden, heads * a["v_head_dim"], k=heads * a["v_head_dim"]),
            "widths": {**x_rows, **q_rows},
        }
    kv_heads, hd = max(1, a["kv_heads"] // tp), a["head_dim"]
    return {
        "qkv": make.w((heads + 2 * kv_heads) * hd, hidden, k=hidden),
        "o": make.w(hidden, heads * hd, k=heads * hd),
    }


def stage_weights(
    make: WeightMaker, model: dict, layout: dict, step: dict, first: bool, last: bool
) -> dict:
    """Return a rank's `layers`, with `embed`, `final_norm`, `lm_head` on end stages."""
    hidden, tp, ep = model["hidden"], layout["tp"], layout["ep"]
    layers = []
    kinds = ["dense"] * step["dense_layers"] + ["moe"] * step["moe_layers"]
    for kind in kinds:
        layer = {"kind": kind, "norm1": make.ones(hidden), "norm2": make.ones(hidden)}
        layer["attn"] = attention_weights(make, model, tp)
        if kind == "dense":
            inter = model["dense_intermediate"] // tp
            layer["gate_up"] = make.w(2 * inter, hidden, k=hidden)
            layer["down"] = make.w(hidden, inter, k=inter)
        else:
            inter, experts = model["moe_intermediate"] // tp, model["routed_experts"] // ep
            layer["router"] = make.w(model["routed_experts"], hidden, k=hidden, shared=True)
            layer["e_gate_up"] = make.w(experts, 2 * inter, hidden, k=hidden)
            layer["e_down"] = make.w(experts, hidden, inter, k=inter)
            shared = model["shared_experts"] * model["moe_intermediate"] // tp
            if shared:
                layer["s_gate_up"] = make.w(2 * shared, hidden, k=hidden)
                layer["s_down"] = make.w(hidden, shared, k=shared)
        layers.append(layer)
    out = {"layers": layers}
    if first:
        out["embed"] = make.w(model["vocab"], hidden, k=1, shared=True)
    if last:
        out["final_norm"] = make.ones(hidden)
        out["lm_head"] = make.w(-(-model["vocab"] // tp), hidden, k=hidden)
    return out
