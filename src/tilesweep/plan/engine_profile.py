"""An engine's decode step as the composition counts it: the model family, kernels per part kind
(conf/engine), the small kernels the project's step does not run, the host time between steps
and the attention mode per GPU architecture; the engine `lean` is the project's own step."""

from __future__ import annotations

from dataclasses import dataclass, field

from tilesweep.plan.prompt_load import UNCHUNKED, PromptLoad
from tilesweep.plan.step_parts import make_part
from tilesweep.settings import ModelSettings
from tilesweep.settings.engine_spec import (
    LAYER_KINDS,
    AttentionAlso,
    EngineSettings,
    Family,
    Kernel,
)

# The columns of a measured whole-step row that hold the engine's extra kernels it ran, per layer
# of each type (per step), by the list they come from (measure.step.extras; 0 in a lean row).
EXTRA_COLUMNS = {where: f"extra_{where}" for where in LAYER_KINDS}
LEAN = "lean"
# The part kind that stands for an engine's extra kernels (no fit group covers it: each costs the
# fit's device-wide per-kernel cost).
EXTRA = "engine_extra"


def family(model: ModelSettings) -> str:
    """Return the model family kernel lists are keyed by (mla_dsa_moe, mla_moe, gqa_moe)."""
    att = model.attention
    if att.kind == "mla":
        return "mla_dsa_moe" if att.index_topk else "mla_moe"
    return "gqa_moe"


def attention_mode(engine: EngineSettings, arch: str) -> tuple[str, str]:
    """Return (dsa | dense, label) as the engine runs attention on `arch` (default: dsa)."""
    by_arch = engine.attention_by_arch
    if arch in by_arch:
        return by_arch[arch], f"{engine.name} on {arch}"
    if "default" in by_arch:
        return by_arch["default"], f"{engine.name}'s default"
    return "dsa", "the checkpoint's"


def attention_also(engine: EngineSettings, arch: str, mode: str) -> AttentionAlso | None:
    """Return the other attention mode the engine's builds run on `arch`, else None."""
    also = engine.attention_band_by_arch.get(arch)
    return also if also is not None and also.mode != mode else None


@dataclass
class EngineProfile:
    """The engine terms of a composed deployment: launches per kind, extra kernels, host time."""

    name: str
    label: str
    launches: dict[str, float] | None
    extra: dict[str, float] = field(default_factory=dict)
    folded: dict[str, float] = field(default_factory=dict)  # extras a fused all-reduce takes
    host_ms: float = 0.0
    host_label: str = "none"
    # Without CUDA graphs: the CPU time to issue one kernel (ms), and every kernel the list
    # launches per layer of each type (per step), all-reduces included (0: graphs).
    eager_launch_ms: float = 0.0
    kernels: dict[str, float] = field(default_factory=dict)
    # How it runs a serving load's arriving prompts on the target (plan.prompt_load)
    prompt: PromptLoad = UNCHUNKED

    def issued(self, stage: dict, last: bool = True) -> float:
        """Return the kernels the CPU issues for one stage's step."""
        counts = _occurrences(stage, last)
        return sum(n * counts[where] for where, n in self.kernels.items())

    def host_for(self, gpu_ms: float, stage: dict, last: bool = True) -> float:
        """Return the host time a step exposes: host_ms plus, without CUDA graphs,
        max(0, kernels x eager_launch_ms - gpu_ms)."""
        issue = self.issued(stage, last) * self.eager_launch_ms
        return self.host_ms + max(0.0, issue - gpu_ms)

    def extra_parts(self, stage: dict, last: bool, fused: bool = False) -> list[dict]:
        """Return the engine's extra kernels on one stage as bytes-free parts (count: layers);
        `fused`: the all-reduce fuses the norms, so the `folded` kernels do not launch."""
        counts = _occurrences(stage, last)
        less = self.folded if fused else {}
        return [
            make_part(
                f"{self.name}_{where}_extra", EXTRA, 0.0, 0.0, "bf16", counts[where], launches=n
            )
            for where, n in ((w, n - less.get(w, 0.0)) for w, n in self.extra.items())
            if n and counts[where]
        ]


def _occurrences(stage: dict, last: bool) -> dict[str, int]:
    """Return how many times each of LAYER_KINDS' lists runs in one stage's step."""
    moe, dense = stage["moe"], stage["dense"]
    return dict(per_layer=dense + moe, per_moe_layer=moe, per_dense_layer=dense, per_step=int(last))


def _running(
    kernels: list[Kernel], weight_dtype: str, arch: str | None = None, collectives: bool = False
) -> list[Kernel]:
    """Return the kernels of a list that run in `weight_dtype` on `arch` (all-reduces left out)."""
    return [
        k
        for k in kernels
        if not (k.only_for and weight_dtype not in k.only_for)
        and not (k.only_arch and arch not in k.only_arch)
        and (collectives or k.kind != "allreduce")
    ]


def arch_gap(engine: EngineSettings, model: ModelSettings, arch: str) -> str:
    """Return why `engine` cannot run `model`'s attention on `arch` (only_arch), or ''."""
    only = engine.only_arch
    if only and arch not in only:
        return (
            f"engine {engine.name} runs on {', '.join(only)} only (only_arch in "
            f"conf/engine/{engine.name}.yaml)"
        )
    lists = engine.families.get(family(model))
    if lists is None:
        return ""
    cores = [k for k in lists.per_layer if k.kind in ("attention", "attention_gqa")]
    if not cores or any(not k.only_arch or arch in k.only_arch for k in cores):
        return ""
    runs = sorted({a for k in cores for a in k.only_arch}, key=lambda a: int(a[3:].rstrip("a")))
    return (
        f"engine {engine.name}'s {family(model)} list has no attention kernel on {arch} (it "
        f"runs on {', '.join(runs)}: only_arch in conf/engine/{engine.name}.yaml)"
    )


def _family_lists(engine: EngineSettings, model: ModelSettings) -> Family:
    """Return the engine's kernel lists for the model's family; raise ValueError where none."""
    fam = family(model)
    lists = engine.families.get(fam)
    if lists is None:
        raise ValueError(
            f"engine {engine.name} has no kernel list for the {fam} family of "
            f"{model.name} (has {', '.join(sorted(engine.families))})"
        )
    return lists


def extra_kernels(
    engine: EngineSettings | None,
    model: ModelSettings,
    weight_dtype: str = "bf16",
    arch: str | None = None,
) -> dict[str, list[Kernel]]:
    """Return the kernels of `engine`'s list no part kind covers, by where they run; raise
    ValueError where the engine has no list for the model's family."""
    if engine is None or not engine.families:
        name = engine.name if engine is not None else "none"
        raise ValueError(f"engine {name} lists no kernels (the project's own step's count)")
    lists = _family_lists(engine, model)
    return {
        where: [
            k for k in _running(getattr(lists, where), weight_dtype, arch) if k.kind not in kinds
        ]
        for where, kinds in LAYER_KINDS.items()
    }


def as_run(row: dict) -> EngineProfile | None:
    """Return the extra kernels a measured step row ran as an EngineProfile, None if lean."""
    name = row.get("kernel_list")
    if not isinstance(name, str) or name in ("", LEAN):
        return None
    values = {where: row.get(column) for where, column in EXTRA_COLUMNS.items()}
    extra = {where: float(v) if v is not None and v == v else 0.0 for where, v in values.items()}
    return EngineProfile(name, name, None, extra)


def lean() -> EngineProfile:
    """Return the project's own step: the fit's launches, no extra kernels, no host time."""
    return EngineProfile(LEAN, "the project's own step (lean)", None)


def profile(
    engine: EngineSettings,
    model: ModelSettings,
    weight_dtype: str = "bf16",
    arch: str | None = None,
) -> EngineProfile:
    """Return the EngineProfile of `engine` for `model` in `weight_dtype` (lean without a list);
    raise ValueError where it lacks the model's family."""
    host = engine.host
    if not engine.families:
        prof = lean()
        if engine.name != "lean":
            why = f"no kernel list read for {engine.name} {engine.version}"
            prof.name, prof.label = engine.name, f"{why}: the project's own step's count"
    else:
        lists = _family_lists(engine, model)
        launches: dict[str, float] = {}
        extra: dict[str, float] = {}  # the kernels no part kind covers (extra_kernels), counted
        folded: dict[str, float] = {}
        for where, kinds in LAYER_KINDS.items():
            for k in _running(getattr(lists, where), weight_dtype, arch):
                if k.kind in kinds:
                    launches[k.kind] = launches.get(k.kind, 0.0) + k.count
                else:
                    extra[where] = extra.get(where, 0) + k.count
                    if k.folds_into_allreduce:
                        folded[where] = folded.get(where, 0) + k.count
        fam = family(model)
        label = f"engine-faithful kernel count ({engine.name} {engine.version} {fam} list)"
        prof = EngineProfile(engine.name, label, launches, extra, folded)
    prof.host_ms = host.ms
    prof.host_label = (
        f"{host.ms:g} ms per step ({host.source}; its source: conf/engine/"
        f"{engine.name}.yaml host.cite)"
    )
    if host.eager_launch_us and engine.families:
        prof.eager_launch_ms = host.eager_launch_us * 1e-3
        prof.kernels = {
            where: sum(k.count for k in _running(getattr(lists, where), weight_dtype, arch, True))
            for where in LAYER_KINDS
        }
        prof.host_label += (
            f", plus eager issue beyond the GPU step: max(0, kernels x {host.eager_launch_us:g} us"
            " - GPU step) (host.eager_cite)"
        )
    return prof
