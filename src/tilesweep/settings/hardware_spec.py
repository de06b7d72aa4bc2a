"""One conf/hardware/*.yaml file: the device's limits, peaks and collective figures."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from tilesweep.settings.strict import Number, PositiveNumber, Section, ascending, refuse

Positive = Annotated[int, Field(gt=0)]
# A CUDA architecture as the compilers name it (sm_90, sm_90a, sm_120): also a folder name.
Arch = Annotated[str, Field(pattern=r"^sm_[0-9]{2,3}a?$")]


def gpu_counts(by_gpus: dict) -> dict:
    """Return by_gpus when it has figures and each key is a GPU count of at least 2."""
    if not by_gpus:
        raise refuse("", "no GPU counts; give figures for at least one")
    for n in by_gpus:
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise refuse(f"{n!r}", "a GPU count must be an integer of at least 2")
    return by_gpus


# Cited [bytes, us] pairs of one collective, bytes ascending strictly, each time at most a second.
PAIR = Field(min_length=2, max_length=2)
Points = list[Annotated[list[Annotated[Number, Field(ge=0)]], PAIR]]


def checked_points(points: Points) -> list[float]:
    """Return the points' sizes, refusing sizes out of order or a time above a second."""
    sizes = ascending([b for b, _ in points], "points", "bytes must ascend strictly")
    slow = [us for _, us in points if us > 1e6]
    if slow:
        raise refuse("points", "a time above a second (1e6 us) is no collective's", slow[0])
    return sizes


class Figures(Section):
    """One collective at one GPU count: small-message time (us), bus bandwidth (GB/s), and
    optional cited [bytes, us] points the time follows inside their range."""

    latency_us: Number = Field(ge=0, le=1e6)
    busbw_gbs: Number = Field(ge=0.1, le=1e5)
    points: Points = []

    @model_validator(mode="after")
    def _points_ascend(self) -> Figures:
        """Refuse points out of order or slower than a second."""
        checked_points(self.points)
        return self


class OneShotFigures(Section):
    """The engines' custom all-reduce at one GPU count: time, largest message, optional points."""

    latency_us: Number = Field(ge=0, le=1e6)  # at most a second, as Figures
    max_bytes: int = Field(ge=1)
    points: Points = []

    @model_validator(mode="after")
    def _points_ascend(self) -> OneShotFigures:
        """Refuse points out of order, or past max_bytes."""
        sizes = checked_points(self.points)
        if sizes and sizes[-1] > self.max_bytes:
            raise refuse("points", f"bytes must be at most max_bytes={self.max_bytes}", sizes)
        return self


class OneShot(Section):
    """The engines' one-shot custom all-reduce for small messages, off unless enabled."""

    enabled: bool
    by_gpus: Annotated[dict[Any, OneShotFigures], AfterValidator(gpu_counts)]


# The all-reduce algorithms the engines pick by message size (conf/engine `allreduce`).
ALLREDUCE_ALGORITHMS = ("one_shot", "two_shot", "symm_mem", "nccl")


class InGraphSource(Section):
    """One source of in-graph all-reduce times: the machine, the kernel and the `cite`."""

    machine: str = Field(min_length=1)
    kernel: str = Field(min_length=1)
    cite: str = Field(min_length=1)


class InGraphSeries(Section):
    """One algorithm's in-graph time by size at one GPU count ([bytes, us] points, linear)."""

    source: str = Field(min_length=1)
    points: list[Annotated[list[PositiveNumber], PAIR]] = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> InGraphSeries:
        """Refuse sizes out of order, a time that falls as the message grows, or above 1 s."""
        ascending([b for b, _ in self.points], "points", "bytes must ascend strictly")
        times = [us for _, us in self.points]
        ascending(times, "points", "a larger message cannot take less time", strictly=False)
        if max(times) > 1e6:
            raise refuse("points", "a time above a second (1e6 us) is no all-reduce's", max(times))
        return self


class InGraphAlgorithm(Section):
    """One algorithm's in-graph series, by GPU count."""

    by_gpus: Annotated[dict[Any, InGraphSeries], AfterValidator(gpu_counts)]


class InGraph(Section):
    """The engines' all-reduce algorithms timed in CUDA graphs, per algorithm and GPU count."""

    sources: dict[str, InGraphSource] = Field(min_length=1)
    one_shot: InGraphAlgorithm = None
    two_shot: InGraphAlgorithm = None
    symm_mem: InGraphAlgorithm = None
    nccl: InGraphAlgorithm = None

    @model_validator(mode="after")
    def _sources_named(self) -> InGraph:
        """Refuse a series whose source is not among `sources`, or no series at all."""
        if not set(self.model_fields_set) & set(ALLREDUCE_ALGORITHMS):
            raise refuse("", f"no series; give one of {', '.join(ALLREDUCE_ALGORITHMS)}")
        for algorithm, n, series in self.series():
            if series.source not in self.sources:
                why = f"not among sources {', '.join(self.sources)}"
                raise refuse(f"{algorithm}.by_gpus.{n}.source", why, series.source)
        return self

    def series(self) -> list[tuple[str, int, InGraphSeries]]:
        """Return (algorithm, GPU count, series) for every series given."""
        return [
            (algorithm, n, series)
            for algorithm in ALLREDUCE_ALGORITHMS
            if getattr(self, algorithm) is not None
            for n, series in getattr(self, algorithm).by_gpus.items()
        ]


class Collective(Section):
    """One collective's figures, by GPU count."""

    by_gpus: Annotated[dict[Any, Figures], AfterValidator(gpu_counts)]  # by GPU count


class AllReduce(Collective):
    """All-reduce figures, and the one-shot kernel the engines use for small messages."""

    one_shot: OneShot = None
    in_graph: InGraph = None


class Topology(Section):
    """The collectives measured on one PCIe/NVLink topology."""

    all_reduce: AllReduce = None
    all_to_all: Collective = None
    send_recv: Collective = None

    @model_validator(mode="after")
    def _figures(self) -> Topology:
        """Refuse a topology with no figures, or a send/recv over more than one hop."""
        if not self.model_fields_set:
            raise refuse("", "no figures; give all_reduce, all_to_all or send_recv")
        for n in self.send_recv.by_gpus if self.send_recv else ():
            if n != 2:
                raise refuse(f"send_recv.by_gpus.{n}", "send_recv is one hop between 2 GPUs")
        return self


class InterconnectModel(Section):
    """Collective figures per topology (tilesweep.plan.interconnect), and the default one."""

    default: str
    topologies: dict[str, Topology]
    # The topologies a verdict that names none spans in its band (deployment.topology: "").
    plausible: list[str] = []

    @model_validator(mode="after")
    def _default_known(self) -> InterconnectModel:
        """Refuse a default, or a plausible topology, that names no topology, or one twice."""
        why = f"not among topologies {', '.join(self.topologies)}"
        for key, name in [("default", self.default), *(("plausible", n) for n in self.plausible)]:
            if name not in self.topologies:
                raise refuse(key, why, name)
        if len(set(self.plausible)) != len(self.plausible):
            raise refuse("plausible", "names a topology twice; give each once", self.plausible)
        return self


Fraction = Annotated[Number, Field(gt=0, le=1)]
# The math dtypes a peak may be given for, and the weight dtypes a grouped GEMM runs.
PEAK_DTYPES = ("bf16", "fp16", "fp8", "nvfp4", "mxfp4", "fp32")
WEIGHT_DTYPES = ("bf16", "fp8", "nvfp4", "mxfp4")


def check_weight_dtypes(curves: dict | None, key: str) -> None:
    """Refuse a grouped-GEMM curve under a format no weight has (it would never be read)."""
    for dtype in curves or {}:
        if dtype not in WEIGHT_DTYPES:
            why = f"{dtype!r} is not a weight dtype ({', '.join(WEIGHT_DTYPES)})"
            raise refuse(key, why, dtype)


# The least fraction of its roofline a cited kernel figure may be: below 0.1% no kernel streams
# (the case study's failed CUTLASS tiles reached 0.79%); a smaller figure is a typo.
EFFICIENCY_FLOOR = 1e-3


class EfficiencyBand(Section):
    """A cited band of a kernel's fraction of its datasheet roofline on this device."""

    low: Annotated[Number, Field(ge=EFFICIENCY_FLOOR, le=1)]
    high: Annotated[Number, Field(ge=EFFICIENCY_FLOOR, le=1)]
    cite: str = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> EfficiencyBand:
        """Refuse a band whose low end is above its high end."""
        if self.low > self.high:
            raise refuse("low", f"above high={self.high:g}: a band is low <= high", self.low)
        return self


class EfficiencyPoint(EfficiencyBand):
    """The band at one number of tokens per expert, each end named by the kernel that set it."""

    tokens_per_expert: PositiveNumber
    low_kernel: str = Field(min_length=1)
    high_kernel: str = Field(min_length=1)
    # The bytes of one expert (MB, with its scales) each end's kernel was timed on: where given,
    # a layout whose expert is another size takes the band scaled to it (plan.grouped_efficiency).
    low_expert_mb: PositiveNumber | None = None
    high_expert_mb: PositiveNumber | None = None

    @model_validator(mode="after")
    def _both_sized(self) -> EfficiencyPoint:
        """Refuse a point that names the expert size of one end only (it would go unscaled)."""
        if (self.low_expert_mb is None) != (self.high_expert_mb is None):
            given = "low_expert_mb" if self.high_expert_mb is None else "high_expert_mb"
            raise refuse(given, "give both ends' expert sizes or neither", getattr(self, given))
        return self


class EfficiencyCurve(Section):
    """A format's grouped GEMM efficiency by tokens per expert (flat past the ends, said so)."""

    points: list[EfficiencyPoint] = Field(min_length=1)
    beside: EfficiencyBand = None
    # What a point's two ends are: two kernels (a layout takes the band between them, each end
    # scaled to its expert at a fixed cost), or one kernel timed at two expert sizes (a layout
    # takes the efficiency interpolated between them in log size, held at the nearer size past
    # them; plan.grouped_efficiency).
    ends: Literal["kernels", "sizes"] = "kernels"

    @model_validator(mode="after")
    def _ascending(self) -> EfficiencyCurve:
        """Refuse points not in strictly ascending tokens per expert, or a curve of sizes whose
        point does not name two different expert sizes."""
        ts = [pt.tokens_per_expert for pt in self.points]
        ascending(ts, "points", "tokens_per_expert must ascend strictly")
        for pt in self.points if self.ends == "sizes" else []:
            if pt.low_expert_mb is None or math.isclose(pt.low_expert_mb, pt.high_expert_mb):
                why = "ends: sizes needs two different expert sizes at every point"
                raise refuse("ends", why, pt.tokens_per_expert)
        return self


class PromptEfficiency(Section):
    """A kernel's cited fraction of the device's dense peak at prompt sizes (prefill rows)."""

    e_math: Fraction
    cite: str = Field(min_length=1)


class HardwareSpec(Section):
    """A device's shared-memory, register and thread limits, peaks, power and interconnect."""

    name: str
    device_names: list[str]  # the names devices of this kind report (nvidia-smi, torch)
    l2_bytes: Positive | None  # L2 cache from a cited source, or null
    arch: Arch
    cc: Positive
    sm_count: Positive
    smem_per_block_default: Positive
    smem_per_block_optin: Positive
    smem_per_sm: Positive
    smem_reserved_per_block: Annotated[int, Field(ge=0)]
    regs_per_sm: Positive
    max_regs_per_thread: Positive
    max_threads_per_sm: Positive
    max_blocks_per_sm: Positive
    memory_gb: PositiveNumber
    # The memory CUDA reports for the device (cudaDeviceProp.totalGlobalMem, torch's total_memory)
    # in GiB, cited; null: the memory fit takes memory_gb (1e9 B each) and each row says so.
    memory_cuda_gib: PositiveNumber | None = None
    memory_bandwidth_gbs: PositiveNumber
    peak_tflops: dict[str, PositiveNumber | None]
    power_limit_w: PositiveNumber
    interconnect: str
    interconnect_gbs: PositiveNumber
    interconnect_model: InterconnectModel = None
    # Cited fraction of datasheet bandwidth a grouped GEMM reaches at decode, by weight dtype: the
    # verdict takes the band's geometric middle and shows its ends (tpot_low_ms, tpot_high_ms).
    grouped_gemm_efficiency: dict[str, EfficiencyCurve] = None
    # Fraction of the bf16 peak prefill attention reaches here (a serving load's prompts run at it)
    prompt_attention: PromptEfficiency = None

    @model_validator(mode="after")
    def _plausible(self) -> HardwareSpec:
        """Refuse unknown dtypes, shared-memory limits out of order, and figures beyond any GPU."""
        for dtype in self.peak_tflops:
            if dtype not in PEAK_DTYPES:
                why = f"{dtype!r} is not one of {', '.join(PEAK_DTYPES)}"
                raise refuse("peak_tflops", why, dtype)
        check_weight_dtypes(self.grouped_gemm_efficiency, "grouped_gemm_efficiency")
        if not self.smem_per_block_default <= self.smem_per_block_optin <= self.smem_per_sm:
            why = (
                f"shared memory must order default <= optin <= per SM "
                f"({self.smem_per_block_default}, {self.smem_per_block_optin}, {self.smem_per_sm})"
            )
            raise refuse("smem_per_block_default", why, self.smem_per_block_default)
        checks = [
            ("memory_bandwidth_gbs", self.memory_bandwidth_gbs, 1, 1e5),
            ("memory_gb", self.memory_gb, 0.1, 1e5),
            ("memory_cuda_gib", self.memory_cuda_gib or 1.0, 0.1, 1e5),
            ("interconnect_gbs", self.interconnect_gbs, 0.1, 1e5),
        ]
        checks += [(f"peak_tflops.{k}", v, 0.01, 1e5) for k, v in self.peak_tflops.items() if v]
        for key, value, low, high in checks:
            if not low <= value <= high:
                raise refuse(key, f"outside any GPU's range [{low:g}, {high:g}]", value)
        self._in_graph_below_link()
        return self

    def _in_graph_below_link(self) -> None:
        """Refuse an in-graph point whose bus bandwidth, 2(n-1)/n x bytes / time, beats the link."""
        block = self.interconnect_model
        for name, topology in (block.topologies if block else {}).items():
            graph = topology.all_reduce.in_graph if topology.all_reduce else None
            for algorithm, n, series in graph.series() if graph else ():
                for nbytes, us in series.points:
                    busbw = 2 * (n - 1) / n * nbytes / (us * 1e3)
                    if busbw > self.interconnect_gbs:
                        key = f"interconnect_model.topologies.{name}.all_reduce.in_graph"
                        why = (
                            f"{algorithm} on {n} GPUs: {nbytes:.0f} B in {us:g} us is "
                            f"{busbw:.0f} GB/s bus bandwidth, above the "
                            f"{self.interconnect_gbs:g} GB/s link"
                        )
                        raise refuse(f"{key}.{algorithm}.by_gpus.{n}", why, [nbytes, us])
