"""The `engine` group: the serving engine a verdict is for, as data read from its own code (kernels
per layer and step, host time, attention per arch, all-reduce); `lean` is the project's own step."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from tilesweep import package_data
from tilesweep.settings.hardware_spec import (
    Arch,
    EfficiencyCurve,
    Positive,
    PositiveNumber,
    PromptEfficiency,
    check_weight_dtypes,
    gpu_counts,
)
from tilesweep.settings.strict import Number, Section, ascending, refuse

DATA_FILES = ("data/plan.yaml",)
# An engine's kernel lists (Family's), each with plan.step_parts' part kinds whose launches it is
# read from, by the layers its part occurs in (one part per layer of its type).
LAYER_KINDS = package_data.data_typed(
    "tilesweep", DATA_FILES[0], "layer_kinds", dict[str, tuple[str, ...]]
)
# The part kinds, plus `allreduce` (the interconnect model's, never counted twice) and `extra`
# (small kernels the project's step does not run; one small kernel each).
KernelKind = Literal[(*(k for kinds in LAYER_KINDS.values() for k in kinds), "allreduce", "extra")]


class Kernel(Section):
    """One kernel (or a run of the same kernel) of an engine's decode layer or step."""

    name: str = Field(min_length=1)
    kind: KernelKind
    # launches per layer (or per step); a fraction: conditional; no step launches 1,000 of one
    count: Number = Field(ge=0, le=1000)
    cite: str = Field(min_length=1)  # file and line (or function) of the engine's code
    # weight dtypes it runs for (activation quantisation: quantised layers only); empty: all
    only_for: list[Literal["bf16", "fp8", "nvfp4", "mxfp4"]] = []
    # archs it launches on (empty: all); a measured step runs only the kernels of every arch
    only_arch: list[Arch] = []
    # true: not launched where a PCIe one-shot all-reduce fuses the norms and carries the message
    # (deployment.pcie_allreduce one_shot_norm)
    folds_into_allreduce: bool = False
    note: str = ""


class Family(Section):
    """The kernels an engine launches for one model family at decode, per layer kind and step."""

    per_layer: list[Kernel]
    per_moe_layer: list[Kernel]
    per_dense_layer: list[Kernel]
    per_step: list[Kernel]

    @model_validator(mode="after")
    def _lists_something(self) -> Family:
        """Refuse a family with no kernel at all: it would pass as an engine-faithful count."""
        if not (self.per_layer or self.per_moe_layer or self.per_dense_layer or self.per_step):
            raise refuse("per_layer", "every kernel list is empty; list the engine's kernels", [])
        if not any(k.kind == "expert_gemm" and k.count > 0 for k in self.per_moe_layer):
            why = "lists no expert_gemm kernel: every MoE layer runs its experts' GEMMs"
            raise refuse("per_moe_layer", why, [k.name for k in self.per_moe_layer])
        return self


class Host(Section):
    """The host time between two decode steps, per step, and where it comes from."""

    ms: Number = Field(ge=0, le=1000)  # per step: a second of host time is no decode step
    source: Literal["cited", "measured", "fitted", "none"]
    cite: str = Field(min_length=1)
    # Without CUDA graphs, the CPU time to issue one kernel (0: graphs); only what exceeds the
    # GPU step is exposed (plan.engine_profile.EngineProfile.host_for).
    eager_launch_us: Number = Field(default=0, ge=0, le=1000)
    eager_cite: str = ""  # where eager_launch_us comes from (required where it is set)

    @model_validator(mode="after")
    def _eager_cited(self) -> Host:
        """Refuse an eager issue cost without its source."""
        if self.eager_launch_us and not self.eager_cite:
            raise refuse("eager_cite", "eager_launch_us is set: name its source in eager_cite")
        return self


class Untimed(Section):
    """A kernel no kernel-level figure times: the verdict's rows there are a labelled gap."""

    kind: Literal["expert_gemm"]
    from_routed_pairs: int = Field(ge=1)  # tokens x top_k at or above which it runs
    kernel: str = Field(min_length=1)
    cite: str = Field(min_length=1)  # the engine's (or library's) code that selects it


class AttentionAlso(Section):
    """Another attention mode an engine runs on one architecture: the verdict's band spans it."""

    mode: Literal["dsa", "dense"]
    cite: str = Field(min_length=1)  # where that build's attention is stated


class KernelFloor(Section):
    """A GEMM kernel's least cited time at decode: a part of `kind` composed below it takes it."""

    kind: Literal["attention_proj", "shared_gemm", "dense_gemm"]
    # per call in one occurrence of the part: its least cited decode time (us; uncovered
    # shapes take the kernel's least)
    calls_us: list[Annotated[Number, Field(gt=0, le=10000)]] = Field(min_length=1, max_length=100)
    kernel: str = Field(min_length=1)
    cite: str = Field(min_length=1)  # where the per-call figures and the engine's pick come from
    only_arch: list[Arch] = []  # archs the figures and the engine's pick hold on (empty: all)


class PrefillChunk(Section):
    """The most prompt tokens one prefill pass (or step) carries on devices below a memory size."""

    below_gib: PositiveNumber | None = None  # devices with less memory (GiB); null: any larger
    tokens: Positive | None  # null: unchunked, the whole prompt in one pass (or step)


# The dense GEMM parts a prompt's rows run through (plan.step_parts kinds) that an engine file may
# give a cited prompt-size efficiency (prefill.linear_gemm).
PromptLinearKind = Literal["attention_proj", "dense_gemm", "shared_gemm"]


class Prefill(Section):
    """How the engine runs the arriving prompts beside the decoding requests (plan.prompt_load):
    `separate`, a prefill pass of its own that the decoding requests wait for; `mixed`, the
    prompt's chunk carried through the decode step's layers."""

    schedule: Literal["separate", "mixed"]
    chunks: list[PrefillChunk] = Field(min_length=1)  # by device memory, ascending; last: null
    cite: str = Field(min_length=1)  # where the engine's code sets the schedule and chunk
    # Its grouped (MoE) GEMM at prompt rows on a GPU (hardware name -> weight format), where a
    # kernel-level figure times this engine's kernel there; elsewhere the decode fit's e_math.
    expert_gemm: dict[str, dict[str, PromptEfficiency]] = {}
    # Its dense GEMMs at prompt rows on a GPU (hardware name -> the GEMM's dtype -> part kind),
    # where a kernel-level figure times this engine's GEMM there; elsewhere the decode fit's e_math.
    linear_gemm: dict[str, dict[str, dict[PromptLinearKind, PromptEfficiency]]] = {}

    @model_validator(mode="after")
    def _chunks_ascend(self) -> Prefill:
        """Refuse chunk sizes whose memory bounds do not ascend to a last unbounded one."""
        bounds = [c.below_gib for c in self.chunks]
        if bounds[-1] is not None or None in bounds[:-1]:
            raise refuse("chunks", "only the last chunk has below_gib null", bounds)
        ascending(bounds[:-1], "chunks", "below_gib must ascend strictly")
        for key in ("expert_gemm", "linear_gemm"):
            for gpu, formats in getattr(self, key).items():
                check_weight_dtypes(formats, f"prefill.{key}.{gpu}")
        return self


class PaddedPass(Section):
    """One pass of a padded expert path over its M_sum rows: bytes a row, in hidden and in the
    expert's TP shard of the intermediate (bf16 2, fp8 1 a value)."""

    name: str = Field(min_length=1)
    hidden_bytes: Number = Field(default=0, ge=0, le=64)
    inter_bytes: Number = Field(default=0, ge=0, le=64)


class MeasuredEMath(EfficiencyCurve):
    """A padded path's GEMM e_math measured on one GPU: by tokens per local expert, one kernel at
    two expert shards (ends: sizes; a layout reads between them in log size)."""

    source: str = Field(min_length=1)  # the kernel timed, the card it ran on and the file

    @model_validator(mode="after")
    def _one_kernel(self) -> MeasuredEMath:
        """Refuse a curve of two kernels: the padded path charges one kernel's rate."""
        if self.ends != "sizes":
            raise refuse("ends", "must be sizes: one kernel timed at two expert shards", self.ends)
        return self


class PaddedExperts(Section):
    """Routed-expert GEMMs an engine runs over worst-case padded rows at decode, whatever the batch:
    M_sum = round_up(rows + local experts x (align - 1), align) (vLLM 0.12's DeepGEMM contiguous
    layout); its GEMMs compute M_sum rows at a measured (else cited) fraction of the datasheet
    peak, its passes stream their bytes on top (plan.padded_experts)."""

    align: int = Field(ge=1, le=1024)
    below_moe_tp: int = Field(ge=2, le=1024)  # the engine takes this path at an MoE TP below it
    only_for: list[Literal["fp8"]] = Field(min_length=1)  # weight formats it runs for
    only_arch: list[Arch] = Field(min_length=1)
    e_math_low: Number = Field(gt=0, le=1)  # its GEMMs' least cited fraction of the peak
    e_math_high: Number = Field(gt=0, le=1)  # and the most
    low_kernel: str = Field(min_length=1)  # the cited kernel and shape of each end
    high_kernel: str = Field(min_length=1)
    passes: list[PaddedPass] = []  # elementwise passes over the M_sum rows between its GEMMs
    # conf/hardware name -> its GEMMs' e_math measured there: a row on that GPU takes it (the
    # band's fast end the cited e_math_high where above it), elsewhere the cited band's middle
    measured: dict[str, MeasuredEMath] = {}
    kernel: str = Field(min_length=1)
    cite: str = Field(min_length=1)  # the engine's code that picks the path and sizes its rows

    @model_validator(mode="after")
    def _ends_ordered(self) -> PaddedExperts:
        """Refuse a band whose low end is above its high end."""
        if self.e_math_low > self.e_math_high:
            raise refuse("e_math_low", "is above e_math_high; give the band low then high")
        return self


class AllReduceStep(Section):
    """One in-graph all-reduce algorithm: messages up to max_bytes (and max_tokens) an earlier step
    leaves."""

    algorithm: Literal["one_shot", "two_shot", "symm_mem", "nccl"]
    max_bytes: int = Field(ge=1)
    # an engine whose table picks by token count (TensorRT-LLM's): at most this many tokens of
    # the model's hidden size as well (None: by bytes alone)
    max_tokens: int | None = Field(default=None, ge=1)
    kernel: str = Field(min_length=1)  # the engine's kernel (a fused one names its fusion)
    cite: str = Field(min_length=1)  # file:line (or function) of the code that picks it


def _steps_ascend(steps: list[AllReduceStep]) -> list[AllReduceStep]:
    """Return steps when there is one and each takes larger messages than the one before it."""
    if not steps:
        raise refuse("", "no algorithm; list at least one step (past the last: NCCL)", [])
    sizes = [step.max_bytes for step in steps]
    if all(step.max_tokens is None for step in steps):
        ascending(sizes, "", "max_bytes must ascend strictly (each step takes larger messages)")
        return steps
    keys = [(step.max_tokens or math.inf, step.max_bytes) for step in steps]
    for before, after in zip(keys, keys[1:], strict=False):
        if after[0] < before[0] or after[1] < before[1] or after == before:
            why = "(max_tokens, max_bytes) must ascend (each step takes larger messages)"
            raise refuse("", why, [(t if t != math.inf else None, b) for t, b in keys])
    return steps


class AllReduceSteps(Section):
    """An engine's all-reduce steps on one architecture, by GPU count."""

    by_gpus: Annotated[
        dict[Any, Annotated[list[AllReduceStep], AfterValidator(_steps_ascend)]],
        AfterValidator(gpu_counts),
    ]


class EngineSettings(Section):
    """The engine the verdict is composed for (conf/engine)."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)  # the code the kernel lists were read from
    families: dict[str, Family]  # mla_dsa_moe, mla_moe, gqa_moe; none: the project's own step
    host: Host
    attention_by_arch: dict[
        Annotated[str, Field(pattern=r"^(sm_[0-9]{2,3}a?|default)$")], Literal["dsa", "dense"]
    ]  # arch (sm_90) -> mode; `default` too
    # arch -> another mode its builds run there; tpot_low_ms-tpot_high_ms span it too
    attention_band_by_arch: dict[Arch, AttentionAlso] = {}
    custom_allreduce: bool  # its own all-reduce (allreduce below) on NVLink; false: NCCL's
    # Its in-graph all-reduce algorithm by message size, per arch and GPU count (plan.allreduce);
    # one not listed takes NCCL's model, and says so.
    allreduce: dict[Arch, AllReduceSteps] = {}
    untimed: list[Untimed] = []  # kernels it runs that no cited figure times (rows: gaps)
    kernel_floors: list[KernelFloor] = []  # cited least per-call times of its GEMM kernels
    padded_experts: PaddedExperts | None = None  # its expert GEMMs over padded rows, if any
    # Its own grouped (MoE) GEMM efficiency on a GPU (conf/hardware name -> format -> curve), where
    # this release's kernel was timed: for this engine it takes the place of that hardware file's
    # grouped_gemm_efficiency of the format (a GPU or format not named keeps the hardware's).
    grouped_gemm_efficiency: dict[str, dict[str, EfficiencyCurve]] = {}
    only_arch: list[Arch] = []  # archs its code runs on (empty: all)
    # How it schedules arriving prompts against decoding (none: mixed, unchunked, the fit's
    # efficiencies: the project's own step)
    prefill: Prefill | None = None

    @model_validator(mode="after")
    def _curve_formats(self) -> EngineSettings:
        """Refuse a curve under a format no weight has (it would never be read, unsaid); the GPU
        names are the catalog's (RootSettings)."""
        for gpu, curves in self.grouped_gemm_efficiency.items():
            check_weight_dtypes(curves, f"grouped_gemm_efficiency.{gpu}")
        return self
