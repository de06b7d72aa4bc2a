"""The `model` and `deployment` groups: what is served, and in which formats and conditions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tilesweep.settings.strict import AtLeastOne, Number, Section, at_least, distinct, refuse

MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
GQA_KEYS = ("kv_heads", "head_dim")
DSA_KEYS = ("index_n_heads", "index_head_dim", "index_topk")
SLIDING_KEYS = ("sliding_window", "sliding_layers")
_KIND_KEYS = {"mla": MLA_KEYS, "gqa": GQA_KEYS}
# Operand types a grid kernel runs (mxfp4 is a deployment weight type only: no grid kernel runs it).
Dtype = Literal["bf16", "fp8", "nvfp4"]


class Attention(Section):
    """Attention: MLA or GQA sizes, with DSA and sliding-window layers where present."""

    kind: Literal["mla", "gqa"]
    heads: AtLeastOne
    # MLA
    q_lora_rank: AtLeastOne = None
    kv_lora_rank: AtLeastOne = None
    qk_nope_head_dim: AtLeastOne = None
    qk_rope_head_dim: AtLeastOne = None
    v_head_dim: AtLeastOne = None
    # GQA
    kv_heads: AtLeastOne = None
    head_dim: AtLeastOne = None
    # DSA indexer
    index_n_heads: AtLeastOne = None
    index_head_dim: AtLeastOne = None
    index_topk: AtLeastOne = None
    # sliding-window attention on some layers
    sliding_window: AtLeastOne = None
    sliding_layers: AtLeastOne = None

    @model_validator(mode="after")
    def _keys_of_kind(self) -> Attention:
        """Refuse a kind's key left out, the other kind's key given, or half an optional group."""
        given = self.model_fields_set
        for key in _KIND_KEYS[self.kind]:
            if key not in given:
                raise refuse("", f"missing key {key!r} for kind {self.kind}")
        other = _KIND_KEYS["gqa" if self.kind == "mla" else "mla"]
        for key in other:
            if key in given:
                raise refuse(key, f"not a {self.kind} key", getattr(self, key))
        for group in (DSA_KEYS, SLIDING_KEYS):
            present = [k for k in group if k in given]
            if present and len(present) < len(group):
                missing = next(k for k in group if k not in given)
                raise refuse("", f"missing key {missing!r} (given {present[0]!r})")
        if self.kind == "gqa" and self.heads % self.kv_heads:
            raise refuse("kv_heads", f"does not divide heads={self.heads}", self.kv_heads)
        return self


class ModelSettings(Section):
    """The model's MoE shapes, layers, attention and vocabulary (tilesweep.plan)."""

    name: str
    hidden: at_least(1, 1 << 20)
    moe_intermediate: at_least(1, 1 << 20)
    routed_experts: at_least(1, 1 << 16)
    top_k: at_least(1, 1 << 10)
    shared_experts: at_least(0)
    moe_layers: at_least(1, 1 << 12)
    dense_layers: at_least(0)
    dense_intermediate: int  # at least 1 where there are dense layers
    vocab: AtLeastOne
    tied_embeddings: bool
    attention: Attention
    source: str

    @model_validator(mode="after")
    def _consistent(self) -> ModelSettings:
        """Refuse top_k above experts, dense layers without a width, or too many sliding layers."""
        if self.top_k > self.routed_experts:
            raise refuse("top_k", f"more than routed_experts={self.routed_experts}", self.top_k)
        if self.dense_layers and self.dense_intermediate < 1:
            why = f"must be at least 1 when dense_layers={self.dense_layers}"
            raise refuse("dense_intermediate", why, self.dense_intermediate)
        layers = self.dense_layers + self.moe_layers
        sliding = self.attention.sliding_layers
        if sliding is not None and sliding > layers:
            raise refuse("attention.sliding_layers", f"more than the {layers} layers", sliding)
        return self


class DeploymentSettings(Section):
    """Weight and KV formats, context and concurrency the verdict describes."""

    # mxfp4 only as weights: no kernel of the grid runs it
    weight_dtype: Literal["bf16", "fp8", "nvfp4", "mxfp4"]
    quantized: list[
        Literal["routed_experts", "shared_experts", "dense_mlp", "attention", "lm_head"]
    ]
    kv_dtype: Literal["bf16", "fp8"]
    context_len: AtLeastOne
    batches: distinct(AtLeastOne)
    runtime_reserve_gb: Number = Field(ge=0)
    kernel_gap_us: Number = Field(ge=0, le=1000)  # at most a millisecond between two kernels
    fit_file: str  # its content: deployment_files.check_files
    fit_batches: list[AtLeastOne]  # at most two distinct; []: the smallest and largest measured
    attention_table: str  # its content: deployment_files.check_files
    attention: Literal["auto", "dsa", "dense"]
    compute_dtype: Literal["", Dtype]  # the quantised layers' math dtype ("": their weight dtype)
    input_len: int = Field(ge=0)  # prompt tokens per request of a serving load; 0: decode only
    output_len: int = Field(ge=0)  # generated tokens per request; 0: decode only
    # The host's PCIe topology the collectives take (a name under the hardware file's
    # interconnect_model.topologies); "": its default, the band spanning its `plausible` ones.
    topology: str = ""
    # The PCIe one-shot custom all-reduce a community build runs for small messages in place of
    # NCCL (conf/hardware `one_shot`, by topology): off, one_shot, or one_shot_norm (the residual
    # add and RMSNorm fused into it, so the list's `folds_into_allreduce` kernels do not launch).
    pcie_allreduce: Literal["off", "one_shot", "one_shot_norm"] = "off"
    # The most prompt tokens one prefill pass (or step) carries as the launch sets it (SGLang
    # --chunked-prefill-size, vLLM --max-num-batched-tokens, TensorRT-LLM max_num_tokens): wins
    # over the engine file's prefill.chunks; 0: the engine file's (by the GPU's memory); -1: none.
    prefill_chunk: int = Field(0, ge=-1, le=1 << 22)

    @model_validator(mode="after")
    def _consistent(self) -> DeploymentSettings:
        """Refuse half a serving load, a math dtype narrower than its weights (a quantisation
        the checkpoint lacks), or more than two fit batches, or the same one twice."""
        if bool(self.input_len) != bool(self.output_len):
            why = (
                f"with output_len={self.output_len}: a serving load gives both (0 and 0 for "
                "decode only at context_len)"
            )
            raise refuse("input_len", why, self.input_len)
        width = {"nvfp4": 4, "mxfp4": 4, "fp8": 8, "bf16": 16}
        if self.compute_dtype and width[self.compute_dtype] < width[self.weight_dtype]:
            why = (
                f"narrower than weight_dtype={self.weight_dtype}: the math runs the weights' "
                "format or a wider one"
            )
            raise refuse("compute_dtype", why, self.compute_dtype)
        fit = self.fit_batches
        if len(fit) > 2 or len(set(fit)) != len(fit):
            why = "at most two distinct batches ([] for the smallest and the largest measured)"
            raise refuse("fit_batches", why, fit)
        return self
