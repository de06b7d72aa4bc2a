"""Compose the Hydra config once and validate it before any job runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tilesweep import question
from tilesweep.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

ALLOWED_DTYPES = ("bf16", "fp8", "nvfp4")
ALLOWED_EPILOGUES = ("default", "finalize")
_ALLOWED_ROUTING = ("uniform", "zipf")
_MAX_TOKENS_PER_EXPERT = 65536
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_GQA_KEYS = ("kv_heads", "head_dim")
_DSA_KEYS = ("index_n_heads", "index_head_dim", "index_topk")
_SLIDING_KEYS = ("sliding_window", "sliding_layers")
_ALLOWED_KV_DTYPES = ("bf16", "fp8")
_ALLOWED_QUANTIZED = ("routed_experts", "shared_experts", "dense_mlp", "attention", "lm_head")

# Expected type of every leaf key, by dotted path; `*` stands for a list element.
_SCHEMA: dict[str, Any] = {
    "results_dir": str,
    "hardware": "hardware",
    "model.name": str,
    "model.hidden": int,
    "model.moe_intermediate": int,
    "model.routed_experts": int,
    "model.top_k": int,
    "model.shared_experts": int,
    "model.moe_layers": int,
    # Whole decode step (tilesweep.plan): layers by type, attention, dense FFN, vocabulary.
    "model.dense_layers": int,
    "model.dense_intermediate": int,
    "model.vocab": int,
    "model.tied_embeddings": bool,
    "model.attention": {
        "kind": str,
        "heads": int,
        **{f"{key}?": int for key in _MLA_KEYS + _GQA_KEYS + _DSA_KEYS + _SLIDING_KEYS},
    },
    "deployment.weight_dtype": str,
    "deployment.quantized": [str],
    "deployment.kv_dtype": str,
    "deployment.context_len": int,
    "deployment.batches": [int],
    "deployment.runtime_reserve_gb": (int, float),
    "deployment.kernel_gap_us": (int, float),
    "deployment.fit_file": str,
    "deployment.attention": str,
    "model.source": str,
    "grid.targets": [str],
    "grid.dtypes": [str],
    "grid.tiles": [{"m": int, "n": int, "k": int}],
    "grid.stages": [int],
    "grid.warps": [int],
    "grid.epilogues": [str],
    "grid.tokens_per_expert": [int],
    "grid.layouts": [{"tp": int, "pp": int, "ep": int, "world?": int, "experts?": str}],
    "backend": "backend",  # one section per registered backend: its own `schema`
    "bench.warmup": int,
    "bench.repeats": int,
    "bench.cpu_repeats": int,
    "bench.gpu_experts": int,
    "bench.cpu_experts": int,
    "bench.routing": [str],
    "bench.zipf_alpha": (int, float),
    "bench.seed": int,
    "bench.kernel_timeout_s": (int, float),
    "bench.collective_world_cap": int,
    "bench.collective_repeats": int,
    "bench.collective_extra_sizes": [int],
    "bench.cpu_collective_max_bytes": int,
    "bench.collective_sweep_min_bytes": int,
    "bench.collective_sweep_max_bytes": int,
    "bench.collective_sweep_factor": int,
    "bench.collective_timing": str,
    "bench.collective_graph_calls": int,
    "bench.collective_graph_fill_ms": (int, float),
    "bench.step_dense_layers": int,
    "bench.step_moe_layers": int,
    "bench.step_context_len": int,
    "bench.step_runner": str,
    "bench.step_mode": str,
    "bench.step_emulate": bool,
    "bench.step_moe_tables": [str],
    "bench.step_cpu_context_len": int,
    "bench.step_cpu_experts": int,
    "bench.step_cpu_vocab": int,
    "bench.step_cpu_max_batch": int,
    "bench.step_cpu_world_cap": int,
    "bench.step_timeout_s": (int, float),
    "bench.power_seconds": (int, float),
    "bench.decode_power_seconds": (int, float),
    "bench.power_period_s": (int, float),
}

# One collective's figures at one GPU count: small-message time and large-message bus bandwidth.
_FIGURES = {"latency_us": (int, float), "busbw_gbs": (int, float)}
_ONE_SHOT = {"latency_us": (int, float), "max_bytes": int}

HARDWARE_KEYS: dict[str, Any] = {
    "name": str,
    "device_names": [str],  # the names devices of this kind report (nvidia-smi, torch)
    "l2_bytes": (int, type(None)),  # L2 cache from a cited source, or null
    "arch": str,
    "cc": int,
    "sm_count": int,
    "smem_per_block_default": int,
    "smem_per_block_optin": int,
    "smem_per_sm": int,
    "smem_reserved_per_block": int,
    "regs_per_sm": int,
    "max_regs_per_thread": int,
    "max_threads_per_sm": int,
    "max_blocks_per_sm": int,
    "memory_gb": (int, float),
    "memory_bandwidth_gbs": (int, float),
    "peak_tflops": {str: (int, float, type(None))},
    "power_limit_w": (int, float),
    "interconnect": str,
    "interconnect_gbs": (int, float),
    # Collective figures per PCIe/NVLink topology and GPU count (tilesweep.plan.interconnect).
    "interconnect_model?": {
        "default": str,
        "topologies": {
            str: {
                "all_reduce?": {
                    "by_gpus": {str: _FIGURES},  # keys: GPU counts (integers)
                    # the engines' one-shot custom all-reduce for small messages, off unless enabled
                    "one_shot?": {"enabled": bool, "by_gpus": {str: _ONE_SHOT}},
                },
                "all_to_all?": {"by_gpus": {str: _FIGURES}},
                "send_recv?": {"by_gpus": {str: _FIGURES}},
            }
        },
    },
}


def compose(overrides: list[str] | tuple[str, ...] = (), conf_dir: Path | None = None) -> dict:
    """Return the composed, resolved and validated config as plain containers."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    conf_dir = Path(conf_dir or CONF_DIR).resolve()
    overrides = [str(o) for o in overrides]
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
    validate(settings)
    return settings


def load_catalog(conf_dir: Path) -> dict[str, dict]:
    """Return every hardware spec under conf/hardware, by name."""
    from omegaconf import OmegaConf

    catalog = {}
    for path in sorted((Path(conf_dir) / "hardware").glob("*.yaml")):
        spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        catalog[path.stem] = spec
    return catalog


def validate(settings: dict) -> None:
    """Raise ConfigError naming the first bad key and value; return None when all is well."""
    _check_types(settings)
    question.validate(settings.get("question"), settings["catalog"])
    for name, spec in settings["catalog"].items():
        _check_tree(spec, HARDWARE_KEYS, f"hardware[{name}]")
    _check_values(settings)


def _one_line(exc: Exception) -> str:
    """Return the first meaningful line of a Hydra/OmegaConf error."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = lines[0] if lines else type(exc).__name__
    if "Could not find" in head or "not found in" in head:
        # Hydra lists the valid options on the next lines: keep them on one line.
        opts = [ln.lstrip("\t ") for ln in lines[1:] if not ln.startswith("Config search path")]
        if opts:
            head = f"{head} {' '.join(opts)}"
    return f"bad config: {head}"


def _type_name(expected: Any) -> str:
    """Return a readable name for an expected type."""
    if isinstance(expected, tuple):
        return " or ".join(_type_name(e) for e in expected)
    if isinstance(expected, list):
        return f"a list of {_type_name(expected[0])}"
    if isinstance(expected, dict):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true/false"}.get(
        expected, getattr(expected, "__name__", str(expected))
    )


def _is(value: Any, expected: Any) -> bool:
    """Return whether value has the expected leaf type (bools are not integers)."""
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def _check_tree(value: Any, expected: Any, where: str) -> None:
    """Raise ConfigError where value does not match the expected shape."""
    if isinstance(expected, list):
        if not isinstance(value, list):
            raise ConfigError(f"{where}={value!r}: expected {_type_name(expected)}")
        for i, item in enumerate(value):
            _check_tree(item, expected[0], f"{where}[{i}]")
        return
    if isinstance(expected, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}={value!r}: expected a mapping")
        if len(expected) == 1 and next(iter(expected)) is str:
            leaf = next(iter(expected.values()))
            for key, item in value.items():
                _check_tree(item, leaf, f"{where}.{key}")
            return
        names = {key.rstrip("?"): key.endswith("?") for key in expected}
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(names))}"
            )
        missing = sorted(k for k, optional in names.items() if not optional and k not in value)
        if missing:
            raise ConfigError(f"{where}: missing key {missing[0]!r}")
        for key, sub in expected.items():
            if key.rstrip("?") in value:
                _check_tree(value[key.rstrip("?")], sub, f"{where}.{key.rstrip('?')}")
        return
    if not _is(value, expected):
        raise ConfigError(f"{where}={value!r}: expected {_type_name(expected)}")


def _check_backends(section: Any) -> None:
    """Raise ConfigError for a backend section no registered backend reads, or a bad key."""
    from tilesweep import backends

    if not isinstance(section, dict):
        raise ConfigError(f"backend={section!r}: expected a mapping")
    known = {b.name: b for b in backends.registered() if b.schema}
    for name, value in section.items():
        if name not in known:
            raise ConfigError(f"backend.{name}: unknown backend; allowed: {', '.join(known)}")
        _check_tree(value, known[name].schema, f"backend.{name}")


def _get(settings: dict, dotted: str) -> Any:
    """Return the value at a dotted path, raising ConfigError when a key is missing."""
    node: Any = settings
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"{dotted}: missing key")
        node = node[part]
    return node


def _check_types(settings: dict) -> None:
    """Raise ConfigError for unknown top-level sections or leaves of the wrong type."""
    sections = {k.split(".")[0] for k in _SCHEMA} | {"catalog", "question"}
    unknown = sorted(set(settings) - sections)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(sections))}")
    for dotted, expected in _SCHEMA.items():
        value = _get(settings, dotted)
        if expected == "hardware":
            _check_tree(value, HARDWARE_KEYS, dotted)
        elif expected == "backend":
            _check_backends(value)
        else:
            _check_tree(value, expected, dotted)
    for section in ("model", "grid", "bench", "deployment"):
        known = {k.split(".", 1)[1] for k in _SCHEMA if k.startswith(section + ".")}
        extra = sorted(set(settings[section]) - known)
        if extra:
            allowed = ", ".join(sorted(known))
            raise ConfigError(f"{section}.{extra[0]}: unknown key; allowed: {allowed}")


def _check_values(settings: dict) -> None:
    """Raise ConfigError for values of the right type that cannot describe a real sweep."""
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
    for key in ("hidden", "moe_intermediate", "routed_experts", "top_k", "moe_layers"):
        if model[key] < 1:
            raise ConfigError(f"model.{key}={model[key]}: must be at least 1")
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
    for key, low in (("stages", 1), ("warps", 1)):
        for i, v in enumerate(grid[key]):
            if v < low:
                raise ConfigError(f"grid.{key}[{i}]={v}: must be at least {low}")
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
    kinds = {"mla": _MLA_KEYS, "gqa": _GQA_KEYS}
    if att["kind"] not in kinds:
        raise ConfigError(f"model.attention.kind={att['kind']!r}: allowed: mla, gqa")
    for key in ("heads", *kinds[att["kind"]]):
        if key not in att:
            raise ConfigError(f"model.attention: missing key {key!r} for kind {att['kind']}")
    other = kinds["gqa" if att["kind"] == "mla" else "mla"]
    for key in other:
        if key in att:
            raise ConfigError(f"model.attention.{key}={att[key]}: not a {att['kind']} key")
    for group in (_DSA_KEYS, _SLIDING_KEYS):
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
    if dep["weight_dtype"] not in ALLOWED_DTYPES:
        raise ConfigError(
            f"deployment.weight_dtype={dep['weight_dtype']!r}: allowed: {', '.join(ALLOWED_DTYPES)}"
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
    check_choices([dep["attention"]], ("dsa", "dense"), "deployment.attention")
    for key in ("runtime_reserve_gb", "kernel_gap_us"):
        if dep[key] < 0:
            raise ConfigError(f"deployment.{key}={dep[key]}: must be at least 0")


def _check_interconnect_model(block: dict | None, where: str) -> None:
    """Raise ConfigError for an interconnect model naming a missing default, a GPU count that is
    not an integer of at least 2 (send_recv: exactly 2), or a figure that is not a finite number
    in its range; the shape and key names are the schema's."""
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
    if not any(b.build_per != "none" for b in on):
        builders = [b.name for b in backends.registered() if b.build_per != "none"]
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
        if bench[key] <= 0:
            raise ConfigError(f"bench.{key}={bench[key]}: must be more than 0 seconds")
    from tilesweep.tables import COLLECTIVE_TIMINGS

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
    own = ("auto", "fused_moe")  # fused_moe: the step's own path through the fused-MoE kernel
    if runner not in own and not backends.step_capable(runner):
        allowed = [*own] + [form for b in backends.registered() for form in b.step_runner_help()]
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
    if model["routed_experts"] % layout["ep"]:
        raise ConfigError(
            f"{where}.ep={layout['ep']}: does not divide "
            f"model.routed_experts={model['routed_experts']}"
        )
    if layout["pp"] > model["moe_layers"]:
        raise ConfigError(
            f"{where}.pp={layout['pp']}: more stages than model.moe_layers={model['moe_layers']}"
        )
