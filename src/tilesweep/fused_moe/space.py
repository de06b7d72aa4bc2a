"""Pure arithmetic of fused-MoE tuning: space, constraints, default rules, problems, file names."""

from __future__ import annotations

import itertools
import json
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilesweep.settings import Layout, ModelSettings

# Keys of the project's kernel variants beyond the engines' space (fused_moe/kernel.py), each
# with its largest value that is still the engines' kernel: TMA weight loads (1: on), a
# persistent grid of P programs per multiprocessor (0: one program per tile), split-K over up
# to S programs per tile (never more than a GEMM's K blocks; 1: none) and SORT (1: routed pairs
# sorted by expert even where the engines take the tiny-batch direct path, so an expert that
# several pairs reach is streamed once, not once per pair). A config with none of them above
# that value is the engines' kernel and may be exported.
VARIANT_OFF = {"TMA": 0, "PERSISTENT": 0, "SPLIT_K": 1, "SORT": 0}
SLUG = "m{BLOCK_SIZE_M}n{BLOCK_SIZE_N}k{BLOCK_SIZE_K}-g{GROUP_SIZE_M}-w{num_warps}-s{num_stages}"
SPACE_KEYS = tuple(re.findall(r"\{(\w+)\}", SLUG))  # the engines' config keys, in slug order
SUFFIX = {"TMA": "-tma", "PERSISTENT": "-p", "SPLIT_K": "-sk", "SORT": "-sort"}  # in a slug
# Operand bytes per element in the kernel's shared-memory pipeline (fp32: Triton's interpreter in
# tests only; the engines tune bf16 and fp8).
OPERAND_BYTES = {"bf16": 2, "fp8": 1, "fp32": 4}
# The engines' dtype strings in config-file names (bf16 carries none).
ENGINE_DTYPE = {"bf16": None, "fp8": "fp8_w8a8"}


def config_slug(config: dict) -> str:
    """Return a config's identity, e.g. 'm64n128k64-g16-w4-s3[-tma][-p2][-sk2][-sort]'."""
    slug = SLUG.format(**config)
    for key, off in VARIANT_OFF.items():  # TMA and SORT are flags: their suffix alone
        if (config.get(key) or 0) > off:
            slug += SUFFIX[key] + ("" if key in ("TMA", "SORT") else str(config[key]))
    return slug


def parse_slug(slug: str) -> dict:
    """Return the config a slug names (the inverse of config_slug)."""
    m = re.fullmatch(
        r"m(\d+)n(\d+)k(\d+)-g(\d+)-w(\d+)-s(\d+)(-tma)?(?:-p(\d+))?(?:-sk(\d+))?(-sort)?", slug
    )
    if not m:
        raise ValueError(f"not a fused-MoE config slug: {slug!r}")
    config = dict(zip(SPACE_KEYS, (int(g) for g in m.groups()[:6]), strict=True))
    for key, found in zip(VARIANT_OFF, m.groups()[6:], strict=True):
        if found:
            config[key] = 1 if found.startswith("-") else int(found)
    return config


def is_engine_config(config: dict) -> bool:
    """Return whether a config runs the engines' own kernel (no variant of this project's)."""
    return all(config.get(key, 0) <= off for key, off in VARIANT_OFF.items())


def distinct(configs: list[dict]) -> list[dict]:
    """Return the configs in order without repeats (the first of each slug)."""
    out: dict[str, dict] = {}
    for config in configs:
        out.setdefault(config_slug(config), config)
    return list(out.values())


def search_space(space: dict[str, list[int]]) -> list[dict]:
    """Return every config of the space (the product of its value lists), in a fixed order."""
    values = [space[key] for key in SPACE_KEYS]
    return [dict(zip(SPACE_KEYS, combo, strict=True)) for combo in itertools.product(*values)]


def smem_estimate(config: dict, dtype: str) -> int:
    """Return a config's shared memory in bytes: num_stages - 1 buffered A and B tiles."""
    tile = (config["BLOCK_SIZE_M"] + config["BLOCK_SIZE_N"]) * config["BLOCK_SIZE_K"]
    return max(1, config["num_stages"] - 1) * tile * OPERAND_BYTES[dtype]


def constraint(config: dict, dtype: str, smem_limit: int, n: int, k: int, scale: str) -> str | None:
    """Return why a config cannot run on a problem and device (None when it can)."""
    need = smem_estimate(config, dtype)
    if need > smem_limit:
        return f"needs about {need:,} B of shared memory; the device grants {smem_limit:,} B"
    if config["BLOCK_SIZE_K"] > k:
        return f"BLOCK_SIZE_K {config['BLOCK_SIZE_K']} exceeds K={k}"
    if scale == "block" and 128 % config["BLOCK_SIZE_K"]:
        return f"BLOCK_SIZE_K {config['BLOCK_SIZE_K']} does not divide the 128-wide scale block"
    if config.get("TMA") and config["BLOCK_SIZE_K"] * OPERAND_BYTES[dtype] < 16:
        return "a TMA box row must span at least 16 bytes"
    return None


def problems_constraint(config: dict, dtype: str, smem_limit: int, problems: list[dict]):
    """Return why a config cannot run on any GEMM of the problems (None when it can run all)."""
    for problem in problems:
        for n, k in gemm_shapes(problem).values():
            why = constraint(config, dtype, smem_limit, n, k, scale_mode(dtype))
            if why:
                return why
    return None


def scale_mode(dtype: str) -> str:
    """Return how the tuned kernel dequantises a dtype: fp8_w8a8 scales per token and channel."""
    return "channel" if dtype == "fp8" else "none"


def tile_key(slug: str) -> str:
    """Return the part of a slug naming its compiled kernel (no GROUP_SIZE_M, no SORT)."""
    return re.sub(r"-g\d+", "", slug, count=1).removesuffix("-sort")


def graph_amortisation(spec: dict) -> dict:
    """Return time_call's in-graph amortisation of a spec (older specs: one call per replay)."""
    return {"max_calls": spec.get("graph_calls", 1), "fill_ms": spec.get("graph_fill_ms", 1.0)}


def is_direct(m: int, problem: dict, sparsity: int) -> bool:
    """Return whether the engines take the direct path: M * top_k * sparsity <= E."""
    return m * problem["top_k"] * sparsity <= problem["experts"]


def condition_holds(name: str, value, m: int, experts: int, dtype: str) -> bool:
    """Return whether one default-rule condition holds (`dtype: fp8` covers both fp8 formats)."""
    if name == "m_max":
        return m <= value
    if name == "m_le_e":
        return (m <= experts) == value
    if name == "m_per_e_over":
        return m // experts > value
    if name == "dtype":
        return dtype.split("_")[0] == value
    return (dtype == "fp8_block") == value  # block


def engine_default(rules, m: int, experts: int, dtype: str) -> dict:
    """Return the config the default rules pick for M tokens over E experts (first that holds);
    `rules` a worker's JSON spec of them or the settings' EngineDefaults."""
    out = {}
    for key in SPACE_KEYS:
        for rule in map(dict, rules[key] if isinstance(rules, dict) else getattr(rules, key)):
            conditions = ((k, v) for k, v in rule.items() if k != "value" and v is not None)
            if all(condition_holds(k, v, m, experts, dtype) for k, v in conditions):
                out[key] = rule["value"]
                break
        else:
            raise ValueError(f"the default rules for {key} end without a rule that always holds")
    return out


def engine_sources(engines) -> tuple[str, ...]:
    """Return the timed sources of the engines' space: the finalists and each engine's default."""
    return ("finalist", *(f"{name}-default" for name in engines))


def guard_source(spec: dict) -> str | None:
    """Return the source of the guarding default (older journals: vLLM's), or None if absent."""
    guard = spec.get("guard_default", "vllm")
    return f"{guard}-default" if guard in spec["engine_defaults"] else None


def pick(times: dict, routings: list[str], guard: dict | None = None) -> str | None:
    """Return the config fastest over all routings, no slower than `guard` on any (ties: name)."""
    ok = {c: t for c, t in times.items() if all(r in t for r in routings)}
    if guard and all(r in guard for r in routings):
        ok = {c: t for c, t in ok.items() if all(t[r] <= guard[r] for r in routings)}
    return min(ok, key=lambda c: (sum(ok[c][r] for r in routings), c), default=None)


def pick_from(timed, routings: list[str], guard_source: str | None = None) -> str | None:
    """Return `pick` of (slug, routing, source, ms) timings: each config's fastest per routing,
    guarded by the fastest of `guard_source`'s."""
    times: dict[str, dict] = {}
    guard: dict[str, float] = {}
    for slug, routing, source, t in timed:
        slots = [times.setdefault(slug, {})] + ([guard] if source == guard_source else [])
        for slot in slots:
            slot[routing] = min(t, slot.get(routing, t))
    return pick(times, routings, guard)


def nearest_key(keys: list[int], m: int) -> int:
    """Return the tuned batch key an engine uses for M tokens: the nearest one (ties: smaller)."""
    return min(sorted(keys), key=lambda key: abs(key - m))


def problems(model: ModelSettings, layouts: list[Layout]) -> list[dict]:
    """Return the distinct expert-GEMM problems (E, N = intermediate / TP) on one GPU."""
    seen, out = set(), []
    for layout in layouts:
        tp, ep = layout.tp, layout.ep
        e, n = model.routed_experts // ep, model.moe_intermediate // tp
        if (e, n) in seen or model.moe_intermediate % tp or model.routed_experts % ep:
            continue
        seen.add((e, n))
        out.append({"experts": e, "n": n, "hidden": model.hidden, "top_k": model.top_k})
    return sorted(out, key=lambda p: (-p["experts"], -p["n"]))


def gemm_shapes(problem: dict) -> dict[str, tuple[int, int]]:
    """Return (N, K) of the two expert GEMMs: gate/up (2 x intermediate out of hidden) and down."""
    n, hidden = problem["n"], problem["hidden"]
    return {"gate_up": (2 * n, hidden), "down": (hidden, n)}


def config_file_name(experts: int, n: int, device_name: str, dtype: str) -> str:
    """Return the engines' config file name, e.g. 'E=256,N=2048,device_name=NVIDIA_H200.json'."""
    name = f"E={experts},N={n},device_name={device_name.replace(' ', '_')}"
    if ENGINE_DTYPE[dtype]:
        name += f",dtype={ENGINE_DTYPE[dtype]}"
    return name + ".json"


def engine_file_text(configs: dict[str, dict], triton: str) -> str:
    """Return a tuned table as the engines' tuners write it (triton_version first, keys sorted)."""
    table = {"triton_version": triton}
    for m in sorted(configs, key=int):
        table[str(m)] = {key: configs[m][key] for key in SPACE_KEYS}
    return json.dumps(table, indent=4) + "\n"


def pair_traffic(problem: dict, gemm: str, pairs: int, touched: int, dtype: str) -> dict:
    """Return the fewest bytes and the FLOPs of one GEMM over `pairs` rows on `touched` experts."""
    n, k = gemm_shapes(problem)[gemm]
    b = OPERAND_BYTES[dtype]
    a_rows = pairs // problem["top_k"] if gemm == "gate_up" else pairs
    weights = touched * n * k * b
    return {"bytes": weights + a_rows * k * b + pairs * n * 2, "flops": 2 * pairs * n * k}


def tokens_per_expert(m: int, problem: dict) -> float:
    """Return the mean routed rows per local expert for a batch of M tokens."""
    return m * problem["top_k"] / problem["experts"]
