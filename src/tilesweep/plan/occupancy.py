"""Can a built kernel launch on a target, and how many blocks fit on one SM?"""

import math

REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256 (cc 5.0 and newer)


def _bytes(n: int) -> str:
    """Return n formatted as '147,456 B'."""
    return f"{n:,} B"


def blocks_by_registers(regs_per_thread: int, threads: int, hw: dict) -> int | None:
    """Return how many blocks fit on one SM by registers, or None when registers are unknown."""
    if not regs_per_thread or not threads:
        return None
    per_warp = math.ceil(regs_per_thread * 32 / REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    warps = math.ceil(threads / 32)
    return hw["regs_per_sm"] // (per_warp * warps)


def check(smem_bytes: int, regs_per_thread: int, threads: int, hw: dict) -> dict:
    """Return fits (default/optin/no), blocks per SM by each limit, overshoot and a reason."""
    name = hw["name"]
    default, optin = hw["smem_per_block_default"], hw["smem_per_block_optin"]
    by_smem = hw["smem_per_sm"] // (smem_bytes + hw["smem_reserved_per_block"])  # 1 KB reserved
    by_regs = blocks_by_registers(regs_per_thread, threads, hw)
    by_threads = hw["max_threads_per_sm"] // threads if threads else None
    limits = [v for v in (by_smem, by_regs, by_threads, hw["max_blocks_per_sm"]) if v is not None]
    blocks = min(limits)
    result = {
        "smem_limit_bytes": optin,
        "smem_default_bytes": default,
        "smem_per_sm_bytes": hw["smem_per_sm"],
        "overshoot_bytes": max(0, smem_bytes - optin),
        "blocks_per_sm_smem": by_smem,
        "blocks_per_sm_regs": by_regs,
        "blocks_per_sm": blocks,
    }
    if smem_bytes > optin:
        reason = (
            f"needs {_bytes(smem_bytes)} > {_bytes(optin)} opt-in limit on {name}, "
            f"over by {_bytes(smem_bytes - optin)}"
        )
        return {**result, "fits": "no", "status": "launch", "reason": reason}
    if by_regs == 0:
        reason = (
            f"{regs_per_thread} registers x {threads} threads exceed "
            f"{hw['regs_per_sm']:,} registers per SM on {name}"
        )
        return {**result, "fits": "no", "status": "launch", "reason": reason}
    if smem_bytes > default:
        reason = (
            f"fits after opt-in: needs {_bytes(smem_bytes)} > {_bytes(default)} default, "
            f"<= {_bytes(optin)} opt-in on {name}; {blocks} block(s)/SM"
        )
        return {**result, "fits": "optin", "status": "ok", "reason": reason}
    reason = f"fits by default: {_bytes(smem_bytes)} <= {_bytes(default)}; {blocks} block(s)/SM"
    return {**result, "fits": "default", "status": "ok", "reason": reason}
