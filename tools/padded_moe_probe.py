"""vLLM 0.12.0's routed experts on Hopper where DeepGEMM is installed, timed by proxy
(tools/release_gemm_probe.py --padded).

What the release runs (read in the vllm 0.12.0 wheel): block-FP8 MoE at TP < 8 takes DeepGEMM
(quantization/fp8.py:169-188 get_fp8_moe_backend; envs.py:1171-1178 VLLM_USE_DEEP_GEMM,
VLLM_MOE_USE_DEEP_GEMM and VLLM_USE_DEEP_GEMM_E8M0 default 1), and with E8M0 scales every batch
does (fused_moe.py:1597-1619: `is_deep_gemm_e8m0_used() or _valid_deep_gemm(...)`, so the M >= 128
check never applies). DeepGemmExperts.apply (deep_gemm_moe.py) sizes its rows without the CPU's
expert counts: M_sum = round_up(tokens x top_k + experts x 127, 128) (deep_gemm_utils.py:26-44
compute_aligned_M); ep_scatter writes each used expert's id over its rows rounded up to 128 and
leaves the rest of the zero-filled m_indices at expert 0 (deep_gemm_utils.py:61-91, :369-374), so
DeepGEMM (which skips only negative indices) computes every one of the M_sum rows: gate_up
[M_sum, hidden] x [hidden, 2 x inter], silu_and_mul and per_token_group_quant_fp8 over M_sum rows,
then down [M_sum, inter] x [inter, hidden], whatever the batch.

DeepGEMM is not on the device image, so its GEMMs are timed here as FP8 GEMMs of the same shapes in
cuBLASLt (torch._scaled_mm, row-wise scales): the tensor cores' rate at those shapes, a proxy for
DeepGEMM's, which also reads each used expert's weights once (not in the proxy: the composition
charges those bytes). The activation and quantisation passes are single elementwise kernels moving
their bytes (a bf16 add of the two halves; a bf16 -> fp8 cast). Each call has its own buffers,
enough copies to pass L2 four times over; CUDA graph, median of repeats.
"""

from __future__ import annotations

import math
import sys

import torch

ALIGN = 128  # DeepGEMM contiguous M alignment, sm_90 (get_mk_alignment_for_contiguous_layout)
PARTS = ("up", "down", "act", "quant")
STANDS_FOR = {
    "up": "DeepGEMM m_grouped_fp8_gemm_nt_contiguous, gate_up (proxy: cuBLASLt FP8 GEMM)",
    "down": "DeepGEMM m_grouped_fp8_gemm_nt_contiguous, down (proxy: cuBLASLt FP8 GEMM)",
    "act": "silu_and_mul over M_sum rows (proxy: one bf16 elementwise kernel of its bytes)",
    "quant": "per_token_group_quant_fp8 over M_sum rows (proxy: one bf16 -> fp8 cast of its bytes)",
}


def padded_rows(tokens: int, top_k: int, experts: int, align: int = ALIGN) -> int:
    """Return vLLM 0.12.0's M_sum: the rows its DeepGEMM MoE runs for `tokens` at decode."""
    return math.ceil((tokens * top_k + experts * (align - 1)) / align) * align


def shapes(shape: dict, m_sum: int) -> dict:
    """Return {part: (M, N, K, flops, bytes)} of the padded path's four passes for one layer."""
    h, i = shape["hidden"], shape["inter"]
    return {
        "up": (m_sum, 2 * i, h, 2 * m_sum * 2 * i * h, m_sum * (h + 2 * 2 * i)),
        "down": (m_sum, h, i, 2 * m_sum * h * i, m_sum * (i + 2 * h)),
        "act": (m_sum, i, 2 * i, 0, m_sum * (2 * 2 * i + 2 * i)),
        "quant": (m_sum, i, i, 0, m_sum * (2 * i + i)),
    }


def _fp8(rows: int, cols: int, device) -> torch.Tensor:
    """Return a random FP8 e4m3 matrix (values in [-0.5, 0.5))."""
    return (torch.rand(rows, cols, device=device) - 0.5).to(torch.float8_e4m3fn)


def _rowwise(a, b, sa, sb) -> bool:
    """Return whether this torch's _scaled_mm takes row-wise scales (a 16 x 16 call tried)."""
    try:
        torch._scaled_mm(a[:16], b[:16].t(), sa[:16], sb[:, :16], out_dtype=torch.bfloat16)
    except RuntimeError:
        return False
    return True


def call(part: str, m: int, n: int, k: int, device):
    """Return (launch, check, scaling) of one pass: check() gives its error against torch."""
    if part in ("up", "down"):
        a, b = _fp8(m, k, device), _fp8(n, k, device)
        sa, sb = torch.ones(m, 1, device=device), torch.ones(1, n, device=device)
        if device.type == "cuda" and not _rowwise(a, b, sa, sb):  # else one scale a tensor
            sa, sb = torch.ones((), device=device), torch.ones((), device=device)
        out = {"scaling": "row-wise" if sa.dim() else "per tensor"}

        def launch() -> None:
            out["c"] = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)

        def check() -> float:
            ref = a.float() @ b.float().t()
            got = out["c"].float()
            return float(((got - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item())

        return launch, check, out["scaling"]
    x = torch.rand(m, k, device=device, dtype=torch.bfloat16)
    y = torch.empty(
        m, n, device=device, dtype=torch.bfloat16 if part == "act" else torch.float8_e4m3fn
    )
    if part == "act":

        def launch() -> None:
            torch.add(x[:, :n], x[:, n:], out=y)

        def check() -> float:
            return float((y.float() - (x[:, :n].float() + x[:, n:].float())).abs().max().item())

        return launch, check, ""

    def launch() -> None:
        y.copy_(x)

    def check() -> float:
        return float((y.float() - x.float()).abs().max().item())

    return launch, check, ""


def probe_padded(args, common: dict, cuda: bool, rows: list, helpers: dict) -> None:
    """Time the padded path's four passes for each --moe-models shape and token count; helpers:
    release_gemm_probe's timed, copies_for and finish."""
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(3)
    for shape in args.moe_shapes:
        done: dict = {}
        for m in args.token_list:
            m_sum = padded_rows(m, shape["top_k"], shape["experts"])
            for part, (pm, n, k, flops, nbytes) in shapes(shape, m_sum).items():
                row = {**common, "release": "vllm-0.12.0", "part": f"deepgemm_padded_{part}"}
                row |= {"model": shape["model"], "tp": shape["tp"], "experts": shape["experts"]}
                row |= {"top_k": shape["top_k"], "hidden": shape["hidden"]}
                row |= {"inter_shard": shape["inter"], "tokens": m, "m_sum": m_sum}
                row |= {"gemm_mnk": [pm, n, k], "flops_per_call": flops, "bytes_per_call": nbytes}
                row |= {"config_device": common["device"], "stands_for": STANDS_FOR[part]}
                row["config_table"] = "none (DeepGEMM's own heuristics; proxy timed)"
                key = (part, pm, n, k)
                if key not in done:
                    done[key] = _run(part, pm, n, k, nbytes, device, cuda, args, helpers, common)
                row |= done[key]
                if row.get("us_per_call") and flops:
                    row["tflops"] = round(flops / (row["us_per_call"] * 1e-6) / 1e12, 1)
                helpers["finish"](row, rows)


def _run(part, m, n, k, nbytes, device, cuda, args, helpers, common) -> dict:
    """Return one pass's result (status, error, timing) over its copies; a failure is a row."""
    try:
        copies = helpers["copies_for"](nbytes, common["l2_bytes"], cuda)
        made = [call(part, m, n, k, device) for _ in range(copies)]
        result = {"status": "ok", "copies": copies}
        if part in ("up", "down") and cuda:
            result["scaling"] = made[0][2]
        if not cuda:  # the interpreter's CPU: torch's FP8 GEMM has no CPU kernel; shapes only
            if part in ("act", "quant"):
                made[0][0]()
                result["max_abs_err"] = made[0][1]()
            return result | {"figure": "checked (CPU, not timed)"}
        made[0][0]()
        if part in ("up", "down") and m * n * k <= 2**34:
            result["max_rel_err"] = round(made[0][1](), 4)
        result |= helpers["timed"]([c[0] for c in made], args.repeats)
        del made
        return result
    except Exception as exc:  # noqa: BLE001 - a failure is a row: the message, kept
        return {"status": "launch", "message": f"{type(exc).__name__}: {exc}"}


def summary(rows: list) -> list[str]:
    """Return one line per (model, tp, tokens): the padded path's four passes summed (us)."""
    lines, groups = [], {}
    for r in rows:
        if r["part"].startswith("deepgemm_padded_") and r.get("us_per_call"):
            groups.setdefault((r["model"], r["tp"], r["tokens"]), []).append(r["us_per_call"])
    for (model, tp, m), us in sorted(groups.items()):
        lines.append(
            f"{model} tp{tp} m={m}: padded path {sum(us):.1f} us a layer ({len(us)} passes)"
        )
    return lines


def main() -> int:
    """Time the padded path alone: release_gemm_probe.py --padded --gemms none, with its options."""
    import release_gemm_probe  # noqa: PLC0415 - it imports this module: a loop at the top

    return release_gemm_probe.main(["--padded", "--gemms", "none", *sys.argv[1:]])


if __name__ == "__main__":
    from release_gemm_probe import tool_main  # noqa: PLC0415 - it puts src/ on the path first

    sys.exit(tool_main("padded_moe_probe", main))
