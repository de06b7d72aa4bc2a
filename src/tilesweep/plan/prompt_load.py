"""How an engine runs a serving load's arriving prompts beside its decoding requests (the engine
file's `prefill`): `separate`, a prefill pass of its own per chunk that every decoding request
waits for (its weights read again, its rows through every layer, its attention over the prompt);
`mixed`, each chunk's rows carried through the decode step's layers. The chunk is the most
prompt tokens one pass (or step) carries on this device; the expert GEMMs of a prompt's rows
and its dense GEMMs (attention projections, dense MLP, shared experts) take the engine's cited
efficiency at prompt sizes on this GPU where its file has one."""

from dataclasses import dataclass

from tilesweep.settings import HardwareSpec
from tilesweep.settings.engine_spec import EngineSettings

GIB = 2**30


@dataclass(frozen=True)
class PromptLoad:
    """The prompt schedule a serving load is composed with (plan.step_time.loaded_step)."""

    schedule: str = "mixed"  # separate | mixed
    chunk: int = 0  # the most prompt tokens one pass or step carries (0: the whole prompt)
    expert_e_math: float | None = None  # the expert GEMMs' cited e_math at prompt rows
    words: str = "mixed into the decode step, unchunked (no engine prefill rule)"
    # the dense GEMMs' cited e_math at prompt rows: (GEMM dtype, part kind, e_math) each
    linear_e_math: tuple[tuple[str, str, float], ...] = ()


# The project's own step (and an engine file without a prefill rule): today's charge.
UNCHUNKED = PromptLoad()


def chunk_tokens(chunks: list, memory_gb: float) -> int:
    """Return the chunk size the engine picks for a device of `memory_gb` (datasheet GB); 0:
    unchunked."""
    gib = memory_gb * 1e9 / GIB
    return next(c.tokens or 0 for c in chunks if c.below_gib is None or gib < c.below_gib)


def prompt_load(
    engine: EngineSettings | None, hw: HardwareSpec, weight_dtype: str, launched: int = 0
) -> PromptLoad:
    """Return the engine's prompt schedule on `hw` for weights in `weight_dtype`; `launched`: the
    chunk the launch sets (deployment.prefill_chunk; 0: the engine file's, -1: unchunked)."""
    rule = engine.prefill if engine is not None else None
    if rule is None:
        return UNCHUNKED
    table = chunk_tokens(rule.chunks, hw.memory_gb)
    whose = f"conf/engine/{engine.name}.yaml prefill"
    if launched:
        whose = f"deployment.prefill_chunk, as launched; the engine file's: {table or 'none'}"
    chunk = max(launched, 0) if launched else table
    cited = rule.expert_gemm.get(hw.name, {}).get(weight_dtype)
    how = "a prefill pass of its own" if rule.schedule == "separate" else "mixed into the step"
    size = f"chunks of {chunk} tokens" if chunk else "the whole prompt at once"
    words = f"{how}, {size} ({whose})"
    if cited:
        words += f"; expert GEMMs at e_math {cited.e_math:g} at prompt rows ({cited.cite})"
    else:
        words += (
            f"; expert GEMMs at the fit's e_math (no prompt-size figure for {engine.name} "
            f"{weight_dtype} on {hw.name})"
        )
    linear = rule.linear_gemm.get(hw.name, {})
    each = [(dtype, kind, c) for dtype, kinds in linear.items() for kind, c in kinds.items()]
    words += linear_words(each, engine.name, hw.name)
    dense = tuple((dtype, kind, c.e_math) for dtype, kind, c in each)
    return PromptLoad(rule.schedule, chunk, cited.e_math if cited else None, words, dense)


def linear_words(each: list[tuple], engine: str, gpu: str) -> str:
    """Return how the dense GEMMs at prompt rows (each: GEMM dtype, part kind, cited entry) are
    charged, for a row's inputs."""
    if not each:
        return f"; dense GEMMs at the fit's e_math (no prompt-size figure for {engine} on {gpu})"
    said = ", ".join(f"{kind} {dtype} {c.e_math:g}" for dtype, kind, c in each)
    cites = "; ".join(dict.fromkeys(c.cite for *_, c in each))
    return f"; dense GEMMs at e_math {said} at prompt rows, other dtypes at the fit's ({cites})"


def prompt_chunks(input_len: int, chunk: int) -> list[int]:
    """Return the prompt tokens each pass carries: chunks of `chunk`, the last the remainder."""
    if not chunk or input_len <= chunk:
        return [input_len]
    full, rest = divmod(input_len, chunk)
    return [chunk] * full + ([rest] if rest else [])
