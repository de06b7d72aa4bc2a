"""The `model` and `deployment` groups: what is served, and in which formats and conditions."""

from __future__ import annotations

from pydantic import Field

from tilesweep.settings.strict import Section

MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
GQA_KEYS = ("kv_heads", "head_dim")
DSA_KEYS = ("index_n_heads", "index_head_dim", "index_topk")
SLIDING_KEYS = ("sliding_window", "sliding_layers")


class Attention(Section):
    """Attention: MLA or GQA sizes, with a DSA indexer and sliding-window layers where the model
    has them. Which keys a kind needs is checked on the values (config._check_architecture); a
    key left out stays unset, and null is refused like any other wrong type."""

    kind: str
    heads: int
    # MLA
    q_lora_rank: int = None
    kv_lora_rank: int = None
    qk_nope_head_dim: int = None
    qk_rope_head_dim: int = None
    v_head_dim: int = None
    # GQA
    kv_heads: int = None
    head_dim: int = None
    # DSA indexer
    index_n_heads: int = None
    index_head_dim: int = None
    index_topk: int = None
    # sliding-window attention on some layers
    sliding_window: int = None
    sliding_layers: int = None


class ModelSettings(Section):
    """The model's MoE shapes, and the layers, attention and vocabulary of its whole decode
    step (tilesweep.plan)."""

    name: str
    hidden: int
    moe_intermediate: int
    routed_experts: int
    top_k: int
    shared_experts: int
    moe_layers: int
    dense_layers: int
    dense_intermediate: int
    vocab: int
    tied_embeddings: bool
    attention: Attention
    source: str


class DeploymentSettings(Section):
    """Weight and KV formats, context and concurrency the verdict describes."""

    weight_dtype: str
    quantized: list[str]
    kv_dtype: str
    context_len: int
    batches: list[int]
    runtime_reserve_gb: float
    kernel_gap_us: float
    fit_file: str
    fit_batches: list[int]
    attention_table: str
    attention: str
    compute_dtype: str  # the quantised layers' math dtype ("": their weight dtype)
    input_len: int = Field(ge=0)  # prompt tokens per request of a serving load; 0: decode only
    output_len: int = Field(ge=0)  # generated tokens per request; 0: decode only
