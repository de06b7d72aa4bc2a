"""The `references` group (conf/references): engines' own measured decode figures, each cited."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tilesweep.settings.strict import Number, Section, refuse
from tilesweep.settings.sweep_space import Layout

# The deployment keys a figure may state as its launch ran them ('': not stated, the deployment's).
STATED = ("kv_dtype", "topology", "pcie_allreduce")


class Figure(Section):
    """One engine measurement: who measured what, where, and the time per output token."""

    engine: str = Field(min_length=1, description="the serving engine, as its source names it")
    version: str = Field(min_length=1, description="the engine's version")
    model: str = Field(min_length=1, description="the conf/model name")
    hardware: str = Field(min_length=1, description="the conf/hardware name")
    deployment: str = Field(
        min_length=1, description="the conf/deployment option: the checkpoint's formats"
    )
    layout: Layout = Field(
        description="the engine's parallel layout, as the grid's layouts are given (experts=ep "
        "spreads whole experts over the TP group; moe_tp sets MoE TP)"
    )
    batch: int = Field(ge=1, le=100_000, description="concurrent requests")
    input_len: int = Field(
        0, ge=0, description="a serving benchmark's prompt tokens per request (0: decode-only)"
    )
    output_len: int = Field(
        0, ge=0, description="a serving benchmark's output tokens per request (0: decode-only)"
    )
    context_len: int = Field(0, ge=0, description="a decode-only figure's tokens in each KV cache")
    prefill_chunk: int = Field(
        0,
        ge=-1,
        le=1 << 22,
        description="the prompt chunk the source's launch states (SGLang --chunked-prefill-size, "
        "vLLM --max-num-batched-tokens, TensorRT-LLM max_num_tokens), passed as "
        "deployment.prefill_chunk; 0: not stated, the engine file's; -1: unchunked. The note "
        "cites the line that sets it",
    )
    kv_dtype: Literal["", "bf16", "fp8"] = Field(
        "",
        description="the KV-cache format the source's launch states (SGLang/vLLM --kv-cache-dtype, "
        "TensorRT-LLM kv_cache_config.dtype; fp8_e4m3 is fp8), passed as deployment.kv_dtype; '': "
        "not stated, the deployment's default (bf16: the engines' `auto` is the checkpoint's "
        "dtype). The note cites the line that sets it",
    )
    topology: str = Field(
        "",
        description="the host's PCIe topology as the source states it (a name under the hardware "
        "file's interconnect_model.topologies), passed as deployment.topology; '': not stated, "
        "the band spanning the plausible ones. The note or a comment above it cites the line",
    )
    pcie_allreduce: Literal["", "off", "one_shot", "one_shot_norm"] = Field(
        "",
        description="the PCIe one-shot custom all-reduce the source's launch ran, passed as "
        "deployment.pcie_allreduce; '': not stated (off). The note or a comment above cites it",
    )
    speculative: str = Field(min_length=1, description="speculative decoding, as the source ran it")
    tpot_ms: Number = Field(
        ge=0.1, le=1e5, description="time per output token as the source measured it (ms)"
    )
    statistic: str = Field(
        "mean", pattern=r"^(mean|median)$", description="which TPOT the source gives"
    )
    engine_config: str = Field(
        "",
        description="the conf/engine option that composes it; '': the engine, lower case, "
        "without '-' (TensorRT-LLM -> tensorrtllm)",
    )
    role: str = Field(
        "test",
        pattern=r"^(train|test)$",
        description="train: a fitted term was fitted on it; test: none saw it (the corpus's "
        "error is reported on these)",
    )
    source: str = Field(min_length=1, description="where the figure is published, and what it is")
    quote: str = Field("", description="the source's own words with the figure")
    note: str = Field("", description="what the source leaves unsaid, and how it was read")

    @model_validator(mode="after")
    def _one_load(self) -> Figure:
        """Refuse half a serving load, and a context beside a load (the load sets the context)."""
        if bool(self.input_len) != bool(self.output_len):
            why = f"with output_len={self.output_len}: a serving figure gives both"
            raise refuse("input_len", why, self.input_len)
        if self.prefill_chunk and not self.input_len:
            why = "without a serving load: only a serving figure's prompts are chunked"
            raise refuse("prefill_chunk", why, self.prefill_chunk)
        if self.input_len and self.context_len:
            why = "beside input_len and output_len: a serving load sets the context; give one"
            raise refuse("context_len", why, self.context_len)
        return self

    def engine_name(self) -> str:
        """Return the conf/engine option that composes this figure."""
        return self.engine_config or self.engine.lower().replace("-", "")

    def overrides(self) -> list[str]:
        """Return the config overrides that compose this figure's deployment."""
        lay = self.layout
        keys = ["input_len", "output_len"] if self.input_len else ["context_len"]  # both or none
        keys += ["prefill_chunk"] if self.prefill_chunk else []
        load = [f"deployment.{key}={getattr(self, key)}" for key in keys]
        return [
            *(f"{group}={option}" for group, option in self.groups().items()),
            f"deployment.batches=[{self.batch}]",
            *load,
            f"grid.layouts=[{{tp:{lay.tp},pp:{lay.pp},ep:{lay.ep},experts:{lay.experts or 'tp'}"
            + (f",moe_tp:{lay.moe_tp}}}]" if lay.moe_tp else "}]"),
            # The figure's verdict times no kernel of the grid: one tile that divides any model.
            "grid.tiles=[{m:16,n:16,k:16}]",
            "references=none",
            *(f"deployment.{key}={value}" for key, value in self.stated().items()),
        ]

    def stated(self) -> dict[str, str]:
        """Return the deployment keys (STATED) this figure's launch states, by value."""
        return {key: getattr(self, key) for key in STATED if getattr(self, key)}

    def groups(self) -> dict[str, str]:
        """Return the config group options that compose this figure (config.FIGURE_GROUPS)."""
        names = {key: getattr(self, key) for key in ("model", "hardware", "deployment")}
        return names | {"engine": self.engine_name()}


class References(Section):
    """The engines' figures a report sets beside its verdict (see conf/references)."""

    figures: list[Figure] = Field([], description="each engine figure, cited")
    figures_from: str = Field(
        "",
        description="a YAML file under conf/references whose `figures:` list is read as the "
        "figures (with libyaml, once per process: the corpus is too long for Hydra's parse); "
        "'' for none; not beside inline figures",
    )
