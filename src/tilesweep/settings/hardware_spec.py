"""One conf/hardware/*.yaml file: the device's limits, peaks and collective figures."""

from __future__ import annotations

from typing import Any

from tilesweep.settings.strict import Section


class Figures(Section):
    """One collective at one GPU count: small-message time and large-message bus bandwidth."""

    latency_us: float
    busbw_gbs: float


class OneShotFigures(Section):
    """The one-shot custom all-reduce at one GPU count: its time and largest message."""

    latency_us: float
    max_bytes: int


class OneShot(Section):
    """The engines' one-shot custom all-reduce for small messages, off unless enabled."""

    enabled: bool
    by_gpus: dict[Any, OneShotFigures]  # GPU counts: checked by _check_by_gpus


class Collective(Section):
    """One collective's figures, by GPU count."""

    by_gpus: dict[Any, Figures]  # GPU counts: checked by _check_by_gpus


class AllReduce(Collective):
    """All-reduce figures, and the one-shot kernel the engines use for small messages."""

    one_shot: OneShot = None


class Topology(Section):
    """The collectives measured on one PCIe/NVLink topology."""

    all_reduce: AllReduce = None
    all_to_all: Collective = None
    send_recv: Collective = None


class InterconnectModel(Section):
    """Collective figures per topology (tilesweep.plan.interconnect), and the default one."""

    default: str
    topologies: dict[str, Topology]


class HardwareSpec(Section):
    """A device's shared-memory, register and thread limits, peaks, power and interconnect."""

    name: str
    device_names: list[str]  # the names devices of this kind report (nvidia-smi, torch)
    l2_bytes: int | None  # L2 cache from a cited source, or null
    arch: str
    cc: int
    sm_count: int
    smem_per_block_default: int
    smem_per_block_optin: int
    smem_per_sm: int
    smem_reserved_per_block: int
    regs_per_sm: int
    max_regs_per_thread: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    memory_gb: float
    memory_bandwidth_gbs: float
    peak_tflops: dict[str, float | None]
    power_limit_w: float
    interconnect: str
    interconnect_gbs: float
    interconnect_model: InterconnectModel = None
