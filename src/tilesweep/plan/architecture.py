"""Per-layer parameter bytes, FLOPs and KV-cache bytes of a decode step, from the model block.

Weights: bf16 2 B; fp8 1 B plus one fp32 scale per 128x128 block (DeepSeek-V3's FP8 checkpoint
layout); nvfp4 0.5 B plus one 1-byte (FP8 E4M3) scale per 16 elements = 0.5625 B (the per-tensor
fp32 global scale is left out). Only the linear layers named in `deployment.quantized` are stored in
the deployment's weight dtype; norms, the MoE router, the embedding, the DSA indexer and (unless
listed) the LM head stay bf16, as NVFP4 checkpoints usually keep them. Activations are bf16.

Attention at decode (one new token per sequence):
- MLA, absorbed: q_a/kv_a down-projections (replicated across TP in vLLM), q_b/kv_b up-projections
  and o_proj split by heads. The cache holds (kv_lora_rank + qk_rope_head_dim) elements per token
  and layer, shared by all heads; each head scores 2*(kv_lora+rope) and gathers 2*kv_lora FLOPs per
  cached token it attends. kv_b's absorbed matmuls cost 2 FLOPs per weight, as a projection.
- DSA (GLM-5, DeepSeek-V3.2): the indexer caches one index_head_dim key per token and layer, scores
  every cached token with index_n_heads heads (2*index_n_heads*index_head_dim FLOPs per token), then
  MLA attends only index_topk tokens. Indexer weights stay bf16 and are replicated across TP.
  Its key cache is counted in kv_dtype (an assumption: implementations may store it in FP8).
- GQA: 2*kv_heads*head_dim cached elements per token and layer; a sliding layer caches at most
  sliding_window tokens.
"""

import math

from tilesweep.settings import DeploymentSettings, ModelSettings

ACT_BYTES = 2  # bf16 activations
# mxfp4: 4-bit values and one 8-bit (e8m0) scale per 32 (the OCP MX format gpt-oss ships in).
_BYTES = {
    "bf16": 2.0,
    "fp8": 1.0 + 4.0 / (128 * 128),
    "nvfp4": 0.5 + 1.0 / 16,
    "mxfp4": 0.5 + 1.0 / 32,
}
KV_BYTES = {"bf16": 2.0, "fp8": 1.0}  # per cached KV element (per-tensor scales left out)


def bytes_per_weight(dtype: str) -> float:
    """Return the stored bytes per weight of a dtype, scales included."""
    if dtype not in _BYTES:
        raise ValueError(f"weight dtype {dtype!r}: allowed: {', '.join(_BYTES)}")
    return _BYTES[dtype]


def group_dtype(group: str, dep: DeploymentSettings) -> str:
    """Return the dtype a weight group is stored in: the deployment's if quantized, else bf16."""
    return dep.weight_dtype if group in dep.quantized else "bf16"


def math_dtype(group: str, dep: DeploymentSettings) -> str:
    """Return the dtype a weight group's products run in (compute_dtype if quantised)."""
    if group in dep.quantized and dep.compute_dtype:
        return dep.compute_dtype
    return group_dtype(group, dep)


def linears(model: ModelSettings) -> dict[str, list[tuple[str, int, int, bool]]]:
    """Return {group: [(name, in, out, split over TP)]} of one layer's linear weights per group."""
    h, att = model.hidden, model.attention
    out: dict[str, list[tuple[str, int, int, bool]]] = {}
    if att.kind == "mla":
        heads, qk = att.heads, att.qk_nope_head_dim + att.qk_rope_head_dim
        nope_v = att.qk_nope_head_dim + att.v_head_dim
        out["attention"] = [
            ("q_a_proj", h, att.q_lora_rank, False),
            ("q_b_proj", att.q_lora_rank, heads * qk, True),
            ("kv_a_proj", h, att.kv_lora_rank + att.qk_rope_head_dim, False),
            ("kv_b_proj", att.kv_lora_rank, heads * nope_v, True),
            ("o_proj", heads * att.v_head_dim, h, True),
        ]
        if att.index_topk is not None:
            ih, ihd = att.index_n_heads, att.index_head_dim
            out["indexer"] = [
                ("index_wq_b", att.q_lora_rank, ih * ihd, False),
                ("index_wk", h, ihd, False),
                ("index_weights_proj", h, ih, False),
            ]
    else:
        heads, kv, hd = att.heads, att.kv_heads, att.head_dim
        out["attention"] = [
            ("q_proj", h, heads * hd, True),
            ("k_proj", h, kv * hd, True),
            ("v_proj", h, kv * hd, True),
            ("o_proj", heads * hd, h, True),
        ]
    f = model.dense_intermediate
    out["dense_mlp"] = [("gate_up", h, 2 * f, True), ("down", f, h, True)]
    s = model.shared_experts * model.moe_intermediate
    out["shared_experts"] = [("gate_up", h, 2 * s, True), ("down", s, h, True)] if s else []
    out["router"] = [("router", h, model.routed_experts, False)]
    return out


def group_params(model: ModelSettings, group: str, tp: int) -> float:
    """Return one layer's weights of a group held by one rank of a TP group."""
    return sum(i * o / (tp if split else 1) for _, i, o, split in linears(model).get(group, []))


def expert_params(model: ModelSettings) -> int:
    """Return the weights of one routed expert (gate, up and down)."""
    return 3 * model.hidden * model.moe_intermediate


def kv_bytes_per_token_layer(
    model: ModelSettings, dep: DeploymentSettings, tp: int = 1
) -> dict[str, float]:
    """Return {kv, index} cache bytes per token and layer held by one rank of a TP group."""
    att, eb = model.attention, KV_BYTES[dep.kv_dtype]
    if att.kind == "mla":  # latent cache replicated across TP ranks (vLLM/SGLang, no DP-attention)
        kv = (att.kv_lora_rank + att.qk_rope_head_dim) * eb
        index = att.index_head_dim * eb if att.index_topk is not None else 0.0
        return {"kv": kv, "index": index}
    kv_heads = math.ceil(att.kv_heads / tp)  # vLLM replicates KV heads when tp > kv_heads
    return {"kv": 2 * kv_heads * att.head_dim * eb, "index": 0.0}


def cached_tokens(model: ModelSettings, context_len: int, sliding: bool) -> int:
    """Return the tokens a layer keeps in its KV cache at this context."""
    return min(context_len, model.attention.sliding_window) if sliding else context_len


def attention_core(
    model: ModelSettings, dep: DeploymentSettings, heads: float, sliding: bool
) -> dict[str, float]:
    """Return per-sequence {attended, flops, kv_bytes, index_flops, index_bytes} of a layer."""
    att, ctx = model.attention, dep.context_len
    tokens = cached_tokens(model, ctx, sliding)
    out = {"index_flops": 0.0, "index_bytes": 0.0}
    if att.kind != "mla":
        hd = att.head_dim
        kv_heads = max(heads * att.kv_heads / att.heads, 1.0)
        kv_bytes = tokens * 2 * kv_heads * hd * KV_BYTES[dep.kv_dtype]
        return out | {"attended": tokens, "flops": heads * tokens * 4 * hd, "kv_bytes": kv_bytes}
    cache = kv_bytes_per_token_layer(model, dep)
    attended = min(att.index_topk, tokens) if att.index_topk is not None else tokens
    per_token = 2 * (att.kv_lora_rank + att.qk_rope_head_dim) + 2 * att.kv_lora_rank
    out |= {"attended": attended, "flops": heads * attended * per_token}
    out["kv_bytes"] = attended * cache["kv"]
    if att.index_topk is not None:
        out["index_flops"] = 2.0 * tokens * att.index_n_heads * att.index_head_dim
        out["index_bytes"] = tokens * cache["index"]
    return out


def causal_pairs(tokens: float, window: float) -> float:
    """Return the (query, key) pairs of a causal prompt, each query reading at most `window`."""
    w = min(float(window), float(tokens))
    return w * (w + 1) / 2 + (tokens - w) * w


def prompt_attention(
    model: ModelSettings, dep: DeploymentSettings, heads: float, sliding: bool
) -> dict:
    """Return one layer's attention over one prompt per rank of `heads` heads (and its indexer)."""
    att, n = model.attention, float(dep.input_len)
    window = att.sliding_window if sliding else n
    if att.kind == "mla":
        qk = att.qk_nope_head_dim + att.qk_rope_head_dim
        v = att.v_head_dim
        topk = att.index_topk
        pairs = causal_pairs(n, min(window, topk) if topk else window)
    else:
        qk = v = att.head_dim
        topk, pairs = None, causal_pairs(n, window)
    out = {
        "flops": heads * pairs * 2 * (qk + v),
        "bytes": heads * n * 2 * (qk + v) * ACT_BYTES,  # q, k, v read and o written once
        "index_flops": 0.0,
        "index_bytes": 0.0,
    }
    if topk:
        d = att.index_n_heads * att.index_head_dim
        out["index_flops"] = 2.0 * d * causal_pairs(n, n)
        out["index_bytes"] = n * (d + att.index_head_dim)  # fp8 queries and keys
    return out


INDEX_KEYS = ("index_topk", "index_n_heads", "index_head_dim")


def deployment_model(model: ModelSettings, dep: DeploymentSettings) -> ModelSettings:
    """Return the model as the deployment runs it (`attention: dense`: MLA, no DSA indexer)."""
    att = model.attention
    if dep.attention != "dense" or att.index_topk is None:
        return model
    return model.model_copy(update={"attention": att.model_copy(update=dict.fromkeys(INDEX_KEYS))})
