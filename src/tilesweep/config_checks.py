"""The checks of a composed config that need more than its models, each a one-line ConfigError."""

import functools
from pathlib import Path

from tilesweep import gpu_archs
from tilesweep.errors import ConfigError, one_line
from tilesweep.group_files import group_file
from tilesweep.plan import engine_profile
from tilesweep.settings import HardwareSpec, ModelSettings, RootSettings, check
from tilesweep.settings.engine_spec import EngineSettings
from tilesweep.settings.strict import Refused


def check_settings(settings: dict) -> RootSettings:
    """Return the config as the settings object; raise ConfigError naming a bad key."""
    for name, spec in settings["catalog"].items():
        _check_cc(check(HardwareSpec, spec, f"hardware[{name}]"), f"hardware[{name}]")
    _registry()  # every backend registers its section's model before the root validates
    checked = check(RootSettings, settings)
    _check_cc(checked.hardware, "hardware")
    check_runners(checked)
    return checked


def _registry():
    """Return the backend registry, every backend imported (and its section model registered)."""
    # cycle: the registry's discovery imports fused_moe.commands, which imports config (and so this)
    from tilesweep import backends

    return backends


def _check_cc(spec: HardwareSpec, where: str) -> None:
    """Raise ConfigError where a spec's arch or cc disagrees with architectures.yaml."""
    table = gpu_archs.architectures()
    row = table.get(spec.arch.removesuffix("a"))
    if row is None:
        raise ConfigError(
            f"{where}.arch={spec.arch}: not an architecture conf/architectures.yaml lists "
            f"({', '.join(table)}); add it there first"
        )
    if row.cc != spec.cc:
        raise ConfigError(
            f"{where}.cc={spec.cc}: {spec.arch} is compute capability {row.cc} "
            "(conf/architectures.yaml)"
        )


def check_runners(settings: RootSettings) -> None:
    """Raise ConfigError for runners or backend sections that cannot make a sweep."""
    backends = _registry()
    if not any(b.builder for b in backends.enabled(settings)):
        builders = [b.name for b in backends.builders()]
        raise ConfigError(
            f"backend: {' and '.join(builders)} are {'both' if len(builders) == 2 else 'all'} "
            "disabled; enable at least one to have kernels"
        )
    runner = settings.bench.step_runner
    if runner != "auto" and not backends.step_capable(runner):
        allowed = ["auto", *backends.step_runner_help()]
        raise ConfigError(f"bench.step_runner={runner!r}: allowed: {', '.join(allowed)}")
    for b in backends.registered():
        if settings.backend.section(b.name) is not None:
            b.validate(settings)


def check_engine_name(settings: RootSettings, conf_dir: Path) -> None:
    """Raise ConfigError for an engine file whose name is not its file's."""
    name = settings.engine.name
    files = {p.stem for p in (Path(conf_dir) / "engine").glob("*.yaml")}
    if name not in files:
        raise ConfigError(
            f"engine.name={name!r}: no conf/engine/{name}.yaml; an engine file's name is its file "
            f"name ({', '.join(sorted(files))})"
        )
    _check_engine_archs(settings.engine)
    _check_curve_gpus(settings.engine, settings.catalog)
    own = group_file(conf_dir, "engine", name)
    if own.get("version") != settings.engine.version:
        raise ConfigError(
            f"engine.name={name!r}: conf/engine/{name}.yaml is another engine (version "
            f"{own.get('version')!r}, not {settings.engine.version!r}); an engine file's name "
            "is its file name"
        )


@functools.lru_cache(maxsize=64)
def _engine_file(folder: str, name: str) -> EngineSettings | None:
    """Return an engine file as its model reads it, or None where there is none; raise
    ConfigError naming the file and key it refuses (a figure composes with it in its job)."""
    path = Path(folder) / f"{name}.yaml"
    if not path.is_file():
        return None
    try:
        data = group_file(path.parents[1], "engine", name)
    except ConfigError:
        raise
    except Exception as exc:  # YAML, a missing base file: one line
        raise ConfigError(f"{path}: {one_line(exc)}") from None
    return check(EngineSettings, data, f"conf/engine/{name}.yaml: engine")


def _check_engine_archs(engine: EngineSettings, where: str = "") -> None:
    """Raise ConfigError for an architecture conf/architectures.yaml lacks (never read)."""
    named = [("engine.only_arch", a) for a in engine.only_arch]
    for family, lists in engine.families.items():
        for part in ("per_layer", "per_moe_layer", "per_dense_layer", "per_step"):
            for i, kernel in enumerate(getattr(lists, part)):
                key = f"engine.families.{family}.{part}[{i}].only_arch"
                named += [(key, a) for a in kernel.only_arch]
    for i, floor in enumerate(engine.kernel_floors):
        named += [(f"engine.kernel_floors[{i}].only_arch", a) for a in floor.only_arch]
    padded = engine.padded_experts.only_arch if engine.padded_experts else []
    named += [("engine.padded_experts.only_arch", a) for a in padded]
    named += [("engine.allreduce", a) for a in engine.allreduce]
    named += [("engine.attention_by_arch", a) for a in engine.attention_by_arch if a != "default"]
    named += [("engine.attention_band_by_arch", a) for a in engine.attention_band_by_arch]
    table = gpu_archs.architectures()
    for key, arch in named:
        if arch.removesuffix("a") not in table:
            raise ConfigError(
                f"{where}{key}={arch}: not an architecture conf/architectures.yaml lists "
                f"({', '.join(table)})"
            )


def _check_curve_gpus(engine: EngineSettings, catalog: dict, where: str = "") -> None:
    """Raise ConfigError for an engine curve under a GPU the catalog lacks (never read)."""
    prompt = engine.prefill.expert_gemm if engine.prefill else {}
    linear = engine.prefill.linear_gemm if engine.prefill else {}
    padded = engine.padded_experts.measured if engine.padded_experts else {}
    for key, names in (
        ("grouped_gemm_efficiency", engine.grouped_gemm_efficiency),
        ("prefill.expert_gemm", prompt),
        ("prefill.linear_gemm", linear),
        ("padded_experts.measured", padded),
    ):
        for name in names:
            if name not in catalog:
                raise ConfigError(
                    f"{where}engine.{key}={name!r}: not a GPU of conf/hardware "
                    f"(valid: {', '.join(catalog)}): its figures would never be read"
                )


def check_topology(settings: RootSettings) -> None:
    """Raise ConfigError for a deployment.topology the target's hardware file does not have, or
    a PCIe one-shot all-reduce on a target without PCIe or without any cited one_shot figure."""
    named, pcie = settings.deployment.topology, settings.deployment.pcie_allreduce
    block = settings.hardware.interconnect_model
    tops = block.topologies.values() if block else []
    cited = any(t.all_reduce and t.all_reduce.one_shot for t in tops)
    if pcie != "off" and not ("pcie" in settings.hardware.interconnect and cited):
        where = f"hardware[{settings.hardware.name}] ({settings.hardware.interconnect})"
        why = "has no PCIe topology with one_shot figures; off"
        raise ConfigError(f"deployment.pcie_allreduce={pcie!r}: {where} {why}")
    if not named:
        return
    have = sorted(block.topologies) if block else []
    if named not in have:
        where = f"hardware[{settings.hardware.name}]"
        valid = f"valid: {', '.join(have)}" if have else "it has no interconnect_model"
        raise ConfigError(f"deployment.topology={named!r}: not a topology of {where}; {valid}")


def check_prefill_chunk(settings: RootSettings) -> None:
    """Raise ConfigError for a prefill_chunk with no prompts or no prefill rule to take it."""
    dep, engine = settings.deployment, settings.engine
    chunk = dep.prefill_chunk
    if not chunk:
        return
    if not dep.input_len:
        why = "a serving load's chunk; give deployment.input_len and output_len, or 0 here"
        raise ConfigError(f"deployment.prefill_chunk={chunk}: {why}")
    if engine.prefill is None:
        why = f"conf/engine/{engine.name}.yaml has no prefill rule to chunk; 0 here"
        raise ConfigError(f"deployment.prefill_chunk={chunk}: {why}")


def check_question(settings: RootSettings) -> None:
    """Raise ConfigError for a question about unknown hardware, or tiles no launch row holds."""
    asked, catalog = settings.question.case, settings.catalog
    if asked is not None and asked.hardware not in catalog:
        valid = ", ".join(catalog)
        raise ConfigError(f"question.hardware={asked.hardware!r}: unknown hardware; valid: {valid}")
    tiles = asked.tiles if asked is not None else None
    known = sorted(b.name for b in _registry().registered()) if tiles is not None else []
    if tiles is not None and tiles.backend not in known:
        raise ConfigError(
            f"question.tiles.backend={tiles.backend!r}: no such backend (its launch rows "
            f"hold the tiles); valid: {', '.join(known)}"
        )


def check_question_model(settings: RootSettings, conf_dir: Path) -> None:
    """Raise ConfigError for a question about a model conf/model does not have."""
    asked = settings.question.case
    options = sorted(p.stem for p in (Path(conf_dir) / "model").glob("*.yaml"))
    if asked is not None and asked.model not in options:
        raise ConfigError(
            f"question.model={asked.model!r}: unknown model; valid: {', '.join(options)}"
        )


def check_reference_figures(settings: RootSettings, conf_dir: Path) -> None:
    """Raise ConfigError for a cited figure repeated or of an impossible layout."""
    from omegaconf import OmegaConf

    seen: list[dict] = []
    models: dict[str, tuple[dict, ModelSettings]] = {}  # each model file read and checked once
    for i, fig in enumerate(settings.references.figures):
        where = f"references.figures[{i}]"
        key = {k: v for k, v in fig if k not in ("source", "tpot_ms", "speculative")}
        if key in seen:
            raise ConfigError(
                f"{where}: repeats references.figures[{seen.index(key)}] (same engine, version, "
                "model, hardware, deployment, layout, batch and context); give each figure once"
            )
        seen.append(key)
        if fig.model not in models:
            try:
                model = OmegaConf.to_container(
                    OmegaConf.load(Path(conf_dir) / "model" / f"{fig.model}.yaml"), resolve=True
                )
                models[fig.model] = check(ModelSettings, model, f"model[{fig.model}]")
            except ConfigError:
                raise
            except Exception as exc:
                raise ConfigError(f"{where}.model={fig.model!r}: {one_line(exc)}") from None
        typed = models[fig.model]
        own = fig.engine.lower().replace("-", "")
        name = fig.engine_config
        if name and name != own and not name.startswith(f"{own}_"):
            raise ConfigError(
                f"{where}.engine_config={name!r}: not a file of {fig.engine} "
                f"(conf/engine/{own}.yaml or a release file {own}_*.yaml); a figure composes "
                "with its own engine's kernel lists"
            )
        engine = _engine_file(str(Path(conf_dir) / "engine"), fig.engine_name())
        fam = engine_profile.family(typed)  # the model as its file gives it
        if engine is None:
            raise ConfigError(
                f"{where}.engine={fig.engine!r}: no conf/engine/{fig.engine_name()}.yaml; name its "
                "engine file in engine_config"
            )
        own_file = f"conf/engine/{fig.engine_name()}.yaml: "
        _check_curve_gpus(engine, settings.catalog, own_file)
        _check_engine_archs(engine, own_file)
        families = set(engine.families)
        if families and fam not in families:
            raise ConfigError(
                f"{where}.engine={fig.engine!r}: conf/engine/{fig.engine_name()}.yaml has no "
                f"kernel list for the {fam} family of {fig.model} (it has "
                f"{', '.join(sorted(families))})"
            )
        try:
            fig.layout.fit(typed)
        except Refused as exc:
            raise ConfigError(exc.line(f"{where}.layout")) from None
