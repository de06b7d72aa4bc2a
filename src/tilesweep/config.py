"""Compose the Hydra config once and validate it before any job runs.

Types, key names and finite numbers are the pydantic models' in tilesweep.settings (pydantic,
not Hydra structured configs, because it is already installed and refuses NaN, infinity,
unknown keys and wrong types with their location, where OmegaConf's structured configs accept
NaN and infinity); the checks here are on values: ranges, choices and how the groups fit.
"""

from __future__ import annotations

import re
from pathlib import Path

from tilesweep import question, references
from tilesweep.errors import ConfigError
from tilesweep.io import PROJECT_ROOT, project_path
from tilesweep.settings import (
    DSA_KEYS,
    GQA_KEYS,
    MLA_KEYS,
    SLIDING_KEYS,
    ModelSettings,
    check,
    check_settings,
)

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

ALLOWED_DTYPES = ("bf16", "fp8", "nvfp4")
# Weight formats a deployment may store (mxfp4 only as weights: no kernel of the grid runs it).
_ALLOWED_WEIGHT_DTYPES = (*ALLOWED_DTYPES, "mxfp4")
ALLOWED_EPILOGUES = ("default", "finalize")
_ALLOWED_ROUTING = ("uniform", "zipf")
_MAX_TOKENS_PER_EXPERT = 65536
# Beyond these no GPU has the registers, threads or memory (32 warps = 1,024 threads a block).
_MAX_STAGES, _MAX_WARPS = 16, 32
_YAML_AT = re.compile(r'in "(.+)", line (\d+), column \d+')
_MODEL_MAX = {
    "hidden": 1 << 20,
    "moe_intermediate": 1 << 20,
    "routed_experts": 1 << 16,
    "top_k": 1 << 10,
    "moe_layers": 1 << 12,
}
_ALLOWED_KV_DTYPES = ("bf16", "fp8")
# The longest a timeout or a reading may be: a week (timers overflow far beyond it).
_MAX_SECONDS = 7 * 24 * 3600
_ALLOWED_QUANTIZED = ("routed_experts", "shared_experts", "dense_mlp", "attention", "lm_head")


def compose(overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | None = None) -> dict:
    """Return the composed, resolved and validated config as plain containers."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    conf_dir = Path(conf_dir or CONF_DIR).resolve()
    overrides = [str(o) for o in overrides]
    _check_group_choices(overrides, conf_dir)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=overrides)
        settings = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # Hydra and OmegaConf raise many types; each becomes one line
        raise ConfigError(_one_line(exc)) from None
    finally:
        GlobalHydra.instance().clear()
    settings["catalog"] = load_catalog(conf_dir)
    validate(settings, conf_dir)
    return settings


def load_catalog(conf_dir: Path) -> dict[str, dict]:
    """Return every hardware spec under conf/hardware, by name."""
    from omegaconf import OmegaConf

    catalog = {}
    for path in sorted((Path(conf_dir) / "hardware").glob("*.yaml")):
        try:
            spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        except Exception as exc:  # YAML, binary bytes, an interpolation that names nothing
            why = _one_line(exc).removeprefix("bad config: ")
            raise ConfigError(
                why if str(path) in why else f"{path}: not a usable file ({why})"
            ) from None
        if isinstance(spec, dict) and "name" in spec and spec["name"] != path.stem:
            raise ConfigError(
                f"hardware[{path.stem}].name={spec['name']!r}: differs from its file name "
                f"{path.name}; rows are labelled with the name, so the two must agree"
            )
        catalog[path.stem] = spec
    return catalog


def validate(settings: dict, conf_dir: Path = CONF_DIR) -> None:
    """Raise ConfigError naming the first bad key and value; return None when all is well."""
    check_settings(settings)
    question.validate(settings.get("question"), settings["catalog"])
    references.validate(settings.get("references"), conf_dir)
    _check_values(settings)
    _check_question_model(settings, conf_dir)
    _check_reference_figures(settings, conf_dir)
    _check_files(settings)


def _one_line(exc: Exception) -> str:
    """Return the first meaningful line of a Hydra/OmegaConf error."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = lines[0] if lines else type(exc).__name__
    where = next((m for ln in lines if (m := _YAML_AT.match(ln))), None)
    if where:  # a YAML error: the file and line first, then what the parser says
        said = "; ".join(ln for ln in lines if not _YAML_AT.match(ln))
        return f"{where.group(1)}, line {where.group(2)}: not valid YAML ({said})"
    if "Could not find" in head or "not found in" in head:
        # Hydra lists the valid options on the next lines: keep them on one line.
        opts = [ln.lstrip("\t ") for ln in lines[1:] if not ln.startswith("Config search path")]
        if opts:
            head = f"{head} {' '.join(opts)}"
    return f"bad config: {head}"


def _check_group_choices(overrides: list[str], conf_dir: Path) -> None:
    """Raise ConfigError for a config group option that is a path: every option is a file
    inside conf/<group>/, never one elsewhere (hardware=../../elsewhere/h200)."""
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir()}
    for item in overrides:
        key, sep, value = item.partition("=")
        group = key.lstrip("+~")
        if not sep or group not in groups:
            continue
        options = ", ".join(sorted(p.stem for p in (conf_dir / group).glob("*.yaml")))
        if "/" in value or "\\" in value or ".." in value:
            raise ConfigError(
                f"{item}: a {group} option names a file in conf/{group}/ (one of: {options})"
            )
        if value.strip().startswith(("[", "{")) or "," in value:
            # Hydra would merge the files into one hybrid (b200 with h200's figures).
            raise ConfigError(f"{item}: a {group} option is one name, not a list; valid: {options}")


# Lists whose values name distinct cells: a repeat would time the same cell twice.
_UNIQUE_LISTS = (
    ("grid", "targets"), ("grid", "dtypes"), ("grid", "tiles"), ("grid", "stages"),
    ("grid", "warps"), ("grid", "epilogues"), ("grid", "tokens_per_expert"), ("grid", "layouts"),
    ("deployment", "batches"), ("bench", "routing"),
)  # fmt: skip


def _check_unique(settings: dict) -> None:
    """Raise ConfigError for a list that repeats a value (each would be run twice)."""
    for section, key in _UNIQUE_LISTS:
        seen: list = []
        for i, value in enumerate(settings[section][key]):
            if value in seen:
                raise ConfigError(
                    f"{section}.{key}[{i}]={value!r}: repeats {section}.{key}"
                    f"[{seen.index(value)}]; give each value once"
                )
            seen.append(value)


def _check_values(settings: dict) -> None:
    """Raise ConfigError for values of the right type that cannot describe a real sweep."""
    _check_unique(settings)
    catalog, grid, model = settings["catalog"], settings["grid"], settings["model"]
    for i, name in enumerate(grid["targets"]):
        if name not in catalog:
            raise ConfigError(
                f"grid.targets[{i}]={name!r}: unknown hardware; valid: {', '.join(catalog)}"
            )
    if not grid["targets"]:
        raise ConfigError("grid.targets=[]: name at least one hardware target")
    check_choices(grid["dtypes"], ALLOWED_DTYPES, "grid.dtypes")
    check_choices(grid["epilogues"], ALLOWED_EPILOGUES, "grid.epilogues")
    check_choices(settings["bench"]["routing"], _ALLOWED_ROUTING, "bench.routing")
    for key, high in _MODEL_MAX.items():
        if not 1 <= model[key] <= high:
            raise ConfigError(f"model.{key}={model[key]}: must be between 1 and {high:,}")
    if model["top_k"] > model["routed_experts"]:
        raise ConfigError(
            f"model.top_k={model['top_k']}: more than routed_experts={model['routed_experts']}"
        )
    if model["shared_experts"] < 0:
        raise ConfigError(f"model.shared_experts={model['shared_experts']}: must be at least 0")
    for key in ("tiles", "stages", "warps", "layouts"):
        if not grid[key]:
            raise ConfigError(f"grid.{key}=[]: give at least one")
    _check_backend_values(settings)
    for i, tile in enumerate(grid["tiles"]):
        _check_tile(tile, f"grid.tiles[{i}]", model)
    for key, high in (("stages", _MAX_STAGES), ("warps", _MAX_WARPS)):
        for i, v in enumerate(grid[key]):
            if not 1 <= v <= high:
                raise ConfigError(f"grid.{key}[{i}]={v}: must be between 1 and {high}")
    for i, w in enumerate(grid["warps"]):
        if w & (w - 1):
            raise ConfigError(f"grid.warps[{i}]={w}: must be a power of two")
    for i, t in enumerate(grid["tokens_per_expert"]):
        if not 1 <= t <= _MAX_TOKENS_PER_EXPERT:
            raise ConfigError(
                f"grid.tokens_per_expert[{i}]={t}: must be between 1 and {_MAX_TOKENS_PER_EXPERT}"
            )
    if not grid["tokens_per_expert"]:
        raise ConfigError("grid.tokens_per_expert=[]: give at least one batch size")
    for i, layout in enumerate(grid["layouts"]):
        _check_layout(layout, f"grid.layouts[{i}]", model)
    _check_bench(settings["bench"])
    _check_architecture(model)
    _check_deployment(settings["deployment"])
    for name, spec in catalog.items():
        _check_interconnect_model(spec.get("interconnect_model"), f"hardware[{name}]")


def _check_architecture(model: dict) -> None:
    """Raise ConfigError for a whole-step architecture that cannot describe a real model."""
    att = model["attention"]
    if model["dense_layers"] < 0:
        raise ConfigError(f"model.dense_layers={model['dense_layers']}: must be at least 0")
    if model["dense_layers"] and model["dense_intermediate"] < 1:
        raise ConfigError(
            f"model.dense_intermediate={model['dense_intermediate']}: must be at least 1 "
            f"when dense_layers={model['dense_layers']}"
        )
    if model["vocab"] < 1:
        raise ConfigError(f"model.vocab={model['vocab']}: must be at least 1")
    kinds = {"mla": MLA_KEYS, "gqa": GQA_KEYS}
    if att["kind"] not in kinds:
        raise ConfigError(f"model.attention.kind={att['kind']!r}: allowed: mla, gqa")
    for key in ("heads", *kinds[att["kind"]]):
        if key not in att:
            raise ConfigError(f"model.attention: missing key {key!r} for kind {att['kind']}")
    other = kinds["gqa" if att["kind"] == "mla" else "mla"]
    for key in other:
        if key in att:
            raise ConfigError(f"model.attention.{key}={att[key]}: not a {att['kind']} key")
    for group in (DSA_KEYS, SLIDING_KEYS):
        present = [k for k in group if k in att]
        if present and len(present) < len(group):
            missing = next(k for k in group if k not in att)
            raise ConfigError(f"model.attention: missing key {missing!r} (given {present[0]!r})")
    for key, value in att.items():
        if key != "kind" and value < 1:
            raise ConfigError(f"model.attention.{key}={value}: must be at least 1")
    layers = model["dense_layers"] + model["moe_layers"]
    if att.get("sliding_layers", 0) > layers:
        raise ConfigError(
            f"model.attention.sliding_layers={att['sliding_layers']}: more than the {layers} layers"
        )
    if att["kind"] == "gqa" and att["heads"] % att["kv_heads"]:
        raise ConfigError(
            f"model.attention.kv_heads={att['kv_heads']}: does not divide heads={att['heads']}"
        )


def _check_deployment(dep: dict) -> None:
    """Raise ConfigError for deployment settings outside their allowed values."""
    if dep["weight_dtype"] not in _ALLOWED_WEIGHT_DTYPES:
        raise ConfigError(
            f"deployment.weight_dtype={dep['weight_dtype']!r}: allowed: "
            f"{', '.join(_ALLOWED_WEIGHT_DTYPES)}"
        )
    if dep.get("compute_dtype") not in ("", *ALLOWED_DTYPES):
        raise ConfigError(
            f"deployment.compute_dtype={dep.get('compute_dtype')!r}: allowed: '' (the weight "
            f"dtype), {', '.join(ALLOWED_DTYPES)}"
        )
    if dep["kv_dtype"] not in _ALLOWED_KV_DTYPES:
        raise ConfigError(
            f"deployment.kv_dtype={dep['kv_dtype']!r}: allowed: {', '.join(_ALLOWED_KV_DTYPES)}"
        )
    for i, part in enumerate(dep["quantized"]):
        if part not in _ALLOWED_QUANTIZED:
            raise ConfigError(
                f"deployment.quantized[{i}]={part!r}: allowed: {', '.join(_ALLOWED_QUANTIZED)}"
            )
    if dep["context_len"] < 1:
        raise ConfigError(f"deployment.context_len={dep['context_len']}: must be at least 1")
    if not dep["batches"]:
        raise ConfigError("deployment.batches=[]: give at least one batch")
    for i, b in enumerate(dep["batches"]):
        if b < 1:
            raise ConfigError(f"deployment.batches[{i}]={b}: must be at least 1")
    if len(dep["fit_batches"]) > 2 or len(set(dep["fit_batches"])) != len(dep["fit_batches"]):
        raise ConfigError(
            f"deployment.fit_batches={dep['fit_batches']}: at most two distinct batches "
            "([] for the smallest and the largest measured)"
        )
    for i, b in enumerate(dep["fit_batches"]):
        if b < 1:
            raise ConfigError(f"deployment.fit_batches[{i}]={b}: must be at least 1")
    check_choices([dep["attention"]], ("auto", "dsa", "dense"), "deployment.attention")
    if dep["attention_table"] and not project_path(dep["attention_table"]).is_file():
        raise ConfigError(
            f"deployment.attention_table={dep['attention_table']!r}: no such file "
            '(tools/h200_mla_tune.py writes one; "" for none)'
        )
    for key in ("runtime_reserve_gb", "kernel_gap_us"):
        if dep[key] < 0:
            raise ConfigError(f"deployment.{key}={dep[key]}: must be at least 0")


def _check_interconnect_model(block: dict | None, where: str) -> None:
    """Raise ConfigError for an interconnect model naming a missing default, a GPU count that is
    not an integer of at least 2 (send_recv: exactly 2), or a figure that is not a finite number
    in its range; the shape and key names are the models'."""
    if block is None:
        return
    if block["default"] not in block["topologies"]:
        raise ConfigError(
            f"{where}.interconnect_model.default={block['default']!r}: not among topologies "
            f"{', '.join(block['topologies'])}"
        )
    for topo, collectives in block["topologies"].items():
        at = f"{where}.interconnect_model.topologies.{topo}"
        if not collectives:
            raise ConfigError(f"{at}: no figures; give all_reduce, all_to_all or send_recv")
        for coll, spec in collectives.items():
            _check_by_gpus(spec["by_gpus"], f"{at}.{coll}.by_gpus", coll, _FIGURE_RANGES)
            if "one_shot" in spec:
                shot = spec["one_shot"]["by_gpus"]
                _check_by_gpus(shot, f"{at}.{coll}.one_shot.by_gpus", coll, _ONE_SHOT_RANGES)


# Each figure's lowest value and whether it must exceed it (True) or may equal it.
_FIGURE_RANGES = {"latency_us": (0, False), "busbw_gbs": (0, True)}
_ONE_SHOT_RANGES = {"latency_us": (0, False), "max_bytes": (1, False)}


def _check_by_gpus(by_gpus: dict, where: str, collective: str, ranges: dict) -> None:
    """Raise ConfigError for a bad GPU count or a non-finite or out-of-range figure."""
    import math

    if not by_gpus:
        raise ConfigError(f"{where}: no GPU counts; give figures for at least one")
    for n, figures in by_gpus.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(f"{where}.{n!r}: a GPU count must be an integer of at least 2")
        if collective == "send_recv" and n != 2:
            raise ConfigError(f"{where}.{n}: send_recv is one hop between 2 GPUs")
        for key, (low, strict) in ranges.items():
            value = figures[key]
            if not math.isfinite(value) or value < low or (strict and value == low):
                bound = f"more than {low}" if strict else f"at least {low}"
                raise ConfigError(f"{where}.{n}.{key}={value}: must be a finite number {bound}")


def _check_backend_values(settings: dict) -> None:
    """Raise ConfigError when no enabled backend builds kernels, or one's settings are bad."""
    from tilesweep import backends

    on = backends.enabled(settings)
    if not any(b.builder for b in on):
        builders = [b.name for b in backends.builders()]
        raise ConfigError(
            f"backend: {' and '.join(builders)} are {'both' if len(builders) == 2 else 'all'} "
            "disabled; enable at least one to have kernels"
        )
    for b in backends.registered():
        if b.name in settings["backend"]:
            b.validate(settings)


def _check_bench(bench: dict) -> None:
    """Raise ConfigError for benchmark settings outside their ranges."""
    minimums = {
        "repeats": 1,
        "cpu_repeats": 1,
        "gpu_experts": 1,
        "cpu_experts": 1,
        "collective_world_cap": 1,
        "collective_repeats": 1,
        "warmup": 0,
        "seed": 0,
        "cpu_collective_max_bytes": 4,
        "collective_sweep_min_bytes": 4,
        "collective_sweep_max_bytes": 4,
        "collective_sweep_factor": 1,
        "collective_graph_calls": 1,
        "decode_power_seconds": 0,
        "step_dense_layers": 0,
        "step_moe_layers": 1,
        "step_context_len": 1,
        "step_cpu_context_len": 1,
        "step_cpu_experts": 1,
        "step_cpu_vocab": 1,
        "step_cpu_max_batch": 1,
        "step_cpu_world_cap": 1,
    }
    for key, low in minimums.items():
        if bench[key] < low:
            raise ConfigError(f"bench.{key}={bench[key]}: must be at least {low}")
    for key in ("kernel_timeout_s", "step_timeout_s", "power_seconds", "power_period_s"):
        if not 0 < bench[key] <= _MAX_SECONDS:
            raise ConfigError(
                f"bench.{key}={bench[key]}: must be more than 0 seconds and at most "
                f"{_MAX_SECONDS:,} (a week)"
            )
    from tilesweep.columns import COLLECTIVE_TIMINGS

    if bench["collective_timing"] not in COLLECTIVE_TIMINGS:
        raise ConfigError(
            f"bench.collective_timing={bench['collective_timing']!r}: allowed: "
            f"{', '.join(COLLECTIVE_TIMINGS)}"
        )
    if bench["collective_graph_fill_ms"] <= 0:
        raise ConfigError(
            f"bench.collective_graph_fill_ms={bench['collective_graph_fill_ms']}: "
            "must be more than 0"
        )
    if bench["zipf_alpha"] <= 0:
        raise ConfigError(f"bench.zipf_alpha={bench['zipf_alpha']}: must be more than 0")
    if bench["collective_sweep_max_bytes"] < bench["collective_sweep_min_bytes"]:
        raise ConfigError(
            f"bench.collective_sweep_max_bytes={bench['collective_sweep_max_bytes']}: "
            f"less than collective_sweep_min_bytes={bench['collective_sweep_min_bytes']}"
        )
    from tilesweep import backends

    runner = bench["step_runner"]
    if runner != "auto" and not backends.step_capable(runner):
        allowed = ["auto", *backends.step_runner_help()]
        raise ConfigError(f"bench.step_runner={runner!r}: allowed: {', '.join(allowed)}")
    check_choices([bench["step_mode"]], ("graph", "eager"), "bench.step_mode")
    for i, size in enumerate(bench["collective_extra_sizes"]):
        if size < 4:
            raise ConfigError(f"bench.collective_extra_sizes[{i}]={size}: must be at least 4 bytes")


def check_choices(values: list[str], allowed: tuple[str, ...], where: str) -> None:
    """Raise ConfigError for the first value outside allowed, or for an empty list."""
    if not values:
        raise ConfigError(f"{where}=[]: choose at least one of {', '.join(allowed)}")
    for i, v in enumerate(values):
        if v not in allowed:
            raise ConfigError(f"{where}[{i}]={v!r}: allowed: {', '.join(allowed)}")


def _check_tile(tile: dict, where: str, model: dict) -> None:
    """Raise ConfigError for a tile no kernel can have, or one that does not divide the model."""
    for dim in ("m", "n", "k"):
        v = tile[dim]
        if v < 16 or v % 16:
            raise ConfigError(f"{where}.{dim}={v}: must be a positive multiple of 16")
        if v & (v - 1):
            raise ConfigError(f"{where}.{dim}={v}: must be a power of two")
    for dim_name in ("hidden", "moe_intermediate"):
        if model[dim_name] % tile["k"]:
            raise ConfigError(
                f"{where}.k={tile['k']}: does not divide model.{dim_name}={model[dim_name]}"
            )


def _check_layout(layout: dict, where: str, model: dict) -> None:
    """Raise ConfigError for a layout the model cannot be split into."""
    for key in ("tp", "pp", "ep"):
        if layout[key] < 1:
            raise ConfigError(f"{where}.{key}={layout[key]}: must be at least 1")
    check_choices([layout.get("experts", "tp")], ("tp", "ep"), f"{where}.experts")
    if layout.get("experts") == "ep" and (layout["ep"] != 1 or layout["tp"] < 2):
        raise ConfigError(
            f"{where}.experts=ep: spreads whole experts over the TP group; give tp >= 2 and ep: 1"
        )
    if layout.get("experts") == "ep" and model["routed_experts"] % layout["tp"]:
        raise ConfigError(
            f"{where}.tp={layout['tp']}: does not divide model.routed_experts="
            f"{model['routed_experts']} (experts=ep)"
        )
    world = layout["tp"] * layout["pp"] * layout["ep"]
    if layout.get("world", world) != world:
        raise ConfigError(
            f"{where}.world={layout['world']}: tp*pp*ep = {layout['tp']}*{layout['pp']}*"
            f"{layout['ep']} = {world} devices"
        )
    if model["moe_intermediate"] % layout["tp"]:
        raise ConfigError(
            f"{where}.tp={layout['tp']}: does not divide "
            f"model.moe_intermediate={model['moe_intermediate']}"
        )
    heads = model["attention"]["heads"]
    if heads % layout["tp"]:
        raise ConfigError(
            f"{where}.tp={layout['tp']}: does not divide model.attention.heads={heads} "
            "(each TP rank holds whole attention heads)"
        )
    if model["routed_experts"] % layout["ep"]:
        raise ConfigError(
            f"{where}.ep={layout['ep']}: does not divide "
            f"model.routed_experts={model['routed_experts']}"
        )
    if layout["pp"] > model["moe_layers"]:
        raise ConfigError(
            f"{where}.pp={layout['pp']}: more stages than model.moe_layers={model['moe_layers']}"
        )


def _check_question_model(settings: dict, conf_dir: Path) -> None:
    """Raise ConfigError for a question about a model conf/model does not have (its panel would
    never appear)."""
    asked = question.of(settings)
    options = sorted(p.stem for p in (Path(conf_dir) / "model").glob("*.yaml"))
    if asked is not None and asked.model not in options:
        raise ConfigError(
            f"question.model={asked.model!r}: unknown model; valid: {', '.join(options)}"
        )


def _check_reference_figures(settings: dict, conf_dir: Path) -> None:
    """Raise ConfigError for a cited figure given twice, or one whose layout its model cannot be
    split into (named by the figure's key, not the grid's)."""
    from omegaconf import OmegaConf

    seen: list[dict] = []
    for i, fig in enumerate(references.of(settings).figures):
        where = f"references.figures[{i}]"
        key = fig.model_dump(exclude={"source", "tpot_ms", "speculative"})
        if key in seen:
            raise ConfigError(
                f"{where}: repeats references.figures[{seen.index(key)}] (same engine, version, "
                "model, hardware, deployment, layout, batch and context); give each figure once"
            )
        seen.append(key)
        try:
            model = OmegaConf.to_container(
                OmegaConf.load(Path(conf_dir) / "model" / f"{fig.model}.yaml"), resolve=True
            )
            check(ModelSettings, model, f"model[{fig.model}]")
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"{where}.model={fig.model!r}: {_one_line(exc)}") from None
        _check_layout(fig.layout.model_dump(), f"{where}.layout", model)


def _check_files(settings: dict) -> None:
    """Raise ConfigError for a deployment file (fit_file, attention_table) that is missing, not
    of its kind (a fit: a JSON object with a per-kernel cost; a table: a CSV with the tune's
    columns), or outside the checkout and results_dir unless read_outside is true."""
    dep = settings["deployment"]
    allowed = [PROJECT_ROOT, Path(settings["results_dir"]).resolve()]
    hints = {
        "fit_file": "a kept GPU run's tables/fit.json",
        "attention_table": "tools/h200_mla_tune.py writes one",
    }
    for key, fault in (("fit_file", _fit_fault), ("attention_table", _attention_fault)):
        value = dep.get(key)
        if not value:
            continue
        where = f"deployment.{key}={value!r}"
        path = project_path(value)
        if not path.is_file():
            raise ConfigError(f'{where}: no such file ({hints[key]}; "" for none)')
        inside = any(path.resolve().is_relative_to(a) for a in allowed)
        if not inside and not settings.get("read_outside", False):
            raise ConfigError(
                f"{where}: outside the checkout and results_dir; copy it into either, or set "
                "read_outside=true to read it where it is"
            )
        why = fault(path)
        if why:
            raise ConfigError(f"{where}: {why} ({hints[key]})")


# What the verdict reads of a shipped fit: a per-kernel cost and the fitted groups.
_FIT_KEYS = {"per_kernel_us": (int, float), "groups": dict, "device": str}
_MAX_FIT_BYTES = 1 << 24


def _fit_fault(path: Path) -> str | None:
    """Return why a file is not a launch-aware fit, or None when it is one."""
    import json
    import math

    with path.open("rb") as handle:
        data = handle.read(_MAX_FIT_BYTES + 1)
    if len(data) > _MAX_FIT_BYTES:
        return f"over {_MAX_FIT_BYTES:,} bytes: not a fit"
    try:
        fit = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "not JSON"
    if not isinstance(fit, dict):
        return f"not a fit (a JSON {type(fit).__name__}, not an object)"
    if "gap" in fit and "per_kernel_us" not in fit:
        return f"holds no fit, only why none was made ({str(fit['gap'])[:120]})"
    for key, kind in _FIT_KEYS.items():
        value = fit.get(key)
        if key not in fit or isinstance(value, bool) or not isinstance(value, kind):
            return f"not a fit: no {key} ({_kind_name(kind)})"
    if not math.isfinite(fit["per_kernel_us"]) or fit["per_kernel_us"] < 0:
        return f"per_kernel_us={fit['per_kernel_us']}: not a finite cost"
    return None


def _kind_name(kind) -> str:
    """Return what a type tuple or type is, in words."""
    return {dict: "a mapping", str: "a string"}.get(kind, "a number")


# What the verdict reads of an attention table (plan/attention_table.py).
_ATTENTION_COLUMNS = ("status", "device", "heads", "sequences", "top", "ms")


def _attention_fault(path: Path) -> str | None:
    """Return why a file is not an attention tune table, or None when it is one."""
    import pandas as pd

    try:
        rows = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError):
        return "not a CSV table"
    missing = [c for c in _ATTENTION_COLUMNS if c not in rows.columns]
    if missing:
        return f"not an attention table: no column {', '.join(missing)}"
    for col in ("heads", "sequences", "top", "ms"):
        if not pd.api.types.is_numeric_dtype(rows[col]):
            return f"not an attention table: column {col} is not numbers"
    return None
