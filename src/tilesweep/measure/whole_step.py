"""A measured whole decode step of a depth-reduced model, one process per device.

Every layer type runs at full width: per pipeline stage `dense_layers` dense layers and
`moe_layers` MoE layers, each with its attention reading a real KV cache of `context_len` tokens
per sequence; the first stage embeds the tokens, the last applies the final norm and the LM head
and picks the next token. Batch = concurrent sequences, each producing one token per step.

- Attention: MLA in its absorbed decode form (queries through the low-rank path, keys and values
  from the cached latent), with the DSA indexer where the model has one (an index key cached per
  token, scored over the whole context, then attention over the `index_topk` best tokens): the
  scores and the weighted sum are batched matmuls over each sequence's latent cache, shared by all
  heads. GQA attention is torch's scaled_dot_product_attention over the K/V cache (a fused kernel
  on a GPU).
- TP splits attention heads, the dense FFN and each expert's width, with an all-reduce after the
  attention and after the FFN or MoE; the MLA latent cache is replicated on the TP ranks. EP runs
  attention data-parallel (each EP rank holds batch/ep sequences) and splits the experts, with an
  all-to-all dispatch and combine. The LM head is split over the vocabulary under TP.
- PP: the batch is split into `pp` micro-batches; in each slot every stage runs one micro-batch,
  then hands its activations to the next stage while the last stage hands the picked tokens back
  to the first (a ring), so the pipeline is full from the first slot. One decode step is `pp`
  slots: every sequence gets one token; a token's latency is also `pp` slots.
- Routing is balanced (every expert gets the same rows), so the step matches its batch; the router
  is still computed.

A step is timed whole (device events around `pp` slots after a barrier; the slowest rank's time),
p10/p50/p90 over repeats; separate repeats time each part for the breakdown.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from pathlib import Path

from tilesweep.measure.process_group import SAFE_NCCL_ENV, free_port, init_rank
from tilesweep.plan.sharding import coords, group_ranks

ELEMENT_BYTES = 2  # the measured step runs bf16 weights, activations and cache
# Share of the free device memory a batch's caches and buffers may take.
MEMORY_SHARE = 0.85


class PartClock:
    """Per-part times and launches of one step.

    Modes: `eager`, CUDA events (perf_counter on the CPU) around each part as it runs; `graph`,
    timing events recorded into a CUDA graph being captured (external events, one pair per part
    occurrence), read after each replay; `count`, no times: the LaunchCounter active around the
    step learns which part each op belongs to; `off`, nothing.
    """

    def __init__(self, torch, cuda: bool, mode: str = "eager", counter=None):
        self.torch, self.cuda, self.mode, self.counter = torch, cuda, mode, counter
        self.spans: list[tuple[str, object, object]] = []

    def _mark(self):
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True, external=self.mode == "graph")
            event.record()
            return event
        return time.perf_counter()

    @contextlib.contextmanager
    def part(self, name: str):
        if self.mode == "off":
            yield
            return
        if self.mode == "count":
            outer, self.counter.part = self.counter.part, name
            try:
                yield
            finally:
                self.counter.part = outer
            return
        start = self._mark()
        yield
        self.spans.append((name, start, self._mark()))

    def add_launches(self, n: int) -> None:
        """Count n launches made outside torch's dispatcher (Triton kernels) in this part."""
        if self.mode == "count":
            self.counter.add(n)

    def collect(self) -> dict[str, float]:
        """Return ms per part name (summed over layers); reset for the next step, except in
        graph mode, whose events belong to the graph and are read again after every replay."""
        if self.cuda:
            self.torch.cuda.synchronize()
        out: dict[str, float] = {}
        for name, start, end in self.spans:
            ms = start.elapsed_time(end) if self.cuda else (end - start) * 1e3
            out[name] = out.get(name, 0.0) + ms
        if self.mode != "graph":
            self.spans = []
        return out


def fill_random(tensor, gen, scale: float):
    """Fill a tensor with tiled random values (cheap for GBs of weights) times scale; return it."""
    import torch

    flat = tensor.view(-1)
    block = min(flat.numel(), 1 << 20)
    base = (torch.randn(block, generator=gen) * scale).to(tensor.dtype).to(tensor.device)
    for lo in range(0, flat.numel(), block):
        hi = min(lo + block, flat.numel())
        flat[lo:hi].copy_(base[: hi - lo])
    return tensor


def local_sequences(batch: int, layout: dict) -> int:
    """Return the sequences one rank holds: the batch split over EP ranks (DP attention)."""
    return -(-batch // layout["ep"])


def micro_batches(batch: int, layout: dict) -> list[int]:
    """Return the sequences of each micro-batch on one rank: its sequences split into pp parts."""
    local, pp = local_sequences(batch, layout), layout["pp"]
    base, extra = divmod(local, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


FUSED_RUNNER = "fused_moe"  # the project's fused-MoE Triton kernel (GPU only)


def moe_config(table: dict, m: int, experts: int) -> tuple[dict, str]:
    """Return (config, where it came from) for a fused-MoE GEMM of M rows: the tuned table's
    nearest batch key (as the engines pick), else the engines' default rules."""
    from tilesweep.plan.fused_moe_space import engine_default, nearest_key

    configs = table.get("configs")
    if configs:
        key = nearest_key([int(k) for k in configs], m)
        return dict(configs[str(key)]), f"{table['source']} at M={key}"
    rules = table.get("rules")
    if not rules:
        raise ValueError("the fused-MoE step runner needs a tuned table or default rules")
    return engine_default(rules, m, experts, "bf16"), f"{table['source']} at M={m}"


def emulated_rank(layout: dict) -> int:
    """Return the rank a one-rank emulation runs: the first rank of the last pipeline stage,
    which holds the LM head (the busiest stage of a depth-reduced step)."""
    return (layout["pp"] - 1) * layout["tp"] * layout["ep"]


def cache_bytes_per_sequence(model: dict, layout: dict, context_len: int, layers: int) -> int:
    """Return the KV-cache bytes one sequence takes on one rank over `layers` layers."""
    att = model["attention"]
    if att["kind"] == "mla":
        per_token = att["kv_lora_rank"] + att["qk_rope_head_dim"] + att.get("index_head_dim", 0)
    else:
        per_token = 2 * max(1, att["kv_heads"] // layout["tp"]) * att["head_dim"]
    return per_token * context_len * layers * ELEMENT_BYTES


def _random(torch, shape: tuple, device, gen):
    """Return a bf16 tensor of this shape filled with random values (empty shapes allowed)."""
    out = torch.empty(*shape, dtype=torch.bfloat16, device=device)
    return fill_random(out, gen, 1.0) if out.numel() else out


def _rms(torch, x, w):
    """Return RMS-normalised x times w (torch's fused rms_norm, as engines fuse it)."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)


class _StepRank:
    """One rank's share of the reduced model, its caches and buffers; runs and times steps."""

    def __init__(self, torch, dist, rank: int, spec: dict, cuda: bool):
        self.torch, self.dist, self.cuda = torch, dist, cuda
        self.layout, self.model, self.step_spec = spec["layout"], spec["model"], spec["step"]
        self.kernels = spec.get("kernels", {})
        self.moe_table = spec.get("moe_table") or {}
        # One rank of a larger layout emulated alone: its shards and its batch share, on the
        # one device at hand, with its collectives and pipeline hand-offs left out.
        self.emulated = bool(spec.get("emulate"))
        device_index = 0 if self.emulated else rank
        self.rank = emulated_rank(self.layout) if self.emulated else rank
        self.device = torch.device("cuda", device_index) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        self.at = coords(self.rank, self.layout)
        self.first, self.last = self.at["stage"] == 0, self.at["stage"] == self.layout["pp"] - 1
        self.tp_group = self.ep_group = None
        self.tp_ranks: list[int] = [self.rank]
        for kind, lists in {} if self.emulated else group_ranks(self.layout).items():
            for ranks in lists:
                if len(ranks) < 2:
                    continue
                group = dist.new_group(ranks)  # every rank creates every group, in one order
                if rank in ranks:
                    setattr(self, f"{kind}_group", group)
                    if kind == "tp":
                        self.tp_ranks = ranks
        self.gen = torch.Generator().manual_seed(self.step_spec["seed"] + 1 + self.rank)
        self.shared_gen = torch.Generator().manual_seed(self.step_spec["seed"])
        self._weights()

    def _w(self, *shape, k: int, shared: bool = False):
        """Return a bf16 weight of this shape, random with scale 1/sqrt(k)."""
        torch = self.torch
        source = self.shared_gen if shared else self.gen
        return fill_random(
            torch.empty(*shape, dtype=torch.bfloat16, device=self.device), source, k**-0.5
        )

    def _ones(self, n: int):
        return self.torch.ones(n, dtype=self.torch.bfloat16, device=self.device)

    def _attention_weights(self) -> dict:
        m, tp = self.model, self.layout["tp"]
        a, hidden = m["attention"], m["hidden"]
        heads = max(1, a["heads"] // tp)
        if a["kind"] == "mla":
            nope, rope, lat = a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["kv_lora_rank"]
            w = {
                "q_a": self._w(a["q_lora_rank"], hidden, k=hidden),
                "q_norm": self._ones(a["q_lora_rank"]),
                "q_b": self._w(heads * (nope + rope), a["q_lora_rank"], k=a["q_lora_rank"]),
                "kv_a": self._w(lat + rope, hidden, k=hidden),
                "uk": self._w(heads, nope, lat, k=nope),
                "uv": self._w(heads, lat, a["v_head_dim"], k=lat),
                "o": self._w(hidden, heads * a["v_head_dim"], k=heads * a["v_head_dim"]),
            }
            if a.get("index_topk"):
                w["iq"] = self._w(a["index_n_heads"] * a["index_head_dim"], a["q_lora_rank"], k=1)
                w["ik"] = self._w(a["index_head_dim"], hidden, k=hidden)
                w["iw"] = self._w(a["index_n_heads"], hidden, k=hidden)
            return w
        kv_heads, hd = max(1, a["kv_heads"] // tp), a["head_dim"]
        return {
            "qkv": self._w((heads + 2 * kv_heads) * hd, hidden, k=hidden),
            "o": self._w(hidden, heads * hd, k=heads * hd),
        }

    def _weights(self) -> None:
        m, layout, s = self.model, self.layout, self.step_spec
        hidden, tp, ep = m["hidden"], layout["tp"], layout["ep"]
        self.layers = []
        kinds = ["dense"] * s["dense_layers"] + ["moe"] * s["moe_layers"]
        for kind in kinds:
            layer = {"kind": kind, "norm1": self._ones(hidden), "norm2": self._ones(hidden)}
            layer["attn"] = self._attention_weights()
            if kind == "dense":
                inter = m["dense_intermediate"] // tp
                layer["gate_up"] = self._w(2 * inter, hidden, k=hidden)
                layer["down"] = self._w(hidden, inter, k=inter)
            else:
                inter, experts = m["moe_intermediate"] // tp, m["routed_experts"] // ep
                layer["router"] = self._w(m["routed_experts"], hidden, k=hidden, shared=True)
                layer["e_gate_up"] = self._w(experts, 2 * inter, hidden, k=hidden)
                layer["e_down"] = self._w(experts, hidden, inter, k=inter)
                shared = m["shared_experts"] * m["moe_intermediate"] // tp
                if shared:
                    layer["s_gate_up"] = self._w(2 * shared, hidden, k=hidden)
                    layer["s_down"] = self._w(hidden, shared, k=shared)
            self.layers.append(layer)
        if self.first:
            self.embed = self._w(m["vocab"], hidden, k=1, shared=True)
        if self.last:
            self.final_norm = self._ones(hidden)
            self.lm_head = self._w(-(-m["vocab"] // tp), hidden, k=hidden)

    def _micro_batch(self, n: int) -> dict:
        """Return the buffers and caches of one micro-batch of n sequences."""
        from tilesweep import backends
        from tilesweep.measure.gemm_case import Problem

        torch, m, layout, dev = self.torch, self.model, self.layout, self.device
        a, ctx, hidden = m["attention"], self.step_spec["context_len"], m["hidden"]
        bf16 = torch.bfloat16
        mb = {"n": n, "ids": torch.randint(0, m["vocab"], (n,), device=dev)}
        mb["x"] = torch.empty(n, hidden, dtype=bf16, device=dev)
        mb["h_in"] = _random(torch, (n, hidden), dev, self.gen)
        mb["caches"] = []
        for _ in self.layers:
            if a["kind"] == "mla":
                shapes = {"lat": (n, ctx, a["kv_lora_rank"] + a["qk_rope_head_dim"])}
                if a.get("index_topk"):
                    shapes["idx"] = (n, ctx, a["index_head_dim"])
            else:
                kvh = max(1, a["kv_heads"] // layout["tp"])
                shapes = {"k": (n, kvh, ctx, a["head_dim"]), "v": (n, kvh, ctx, a["head_dim"])}
            cache = {key: _random(torch, shape, dev, self.gen) for key, shape in shapes.items()}
            mb["caches"].append(cache)
        if any(layer["kind"] == "moe" for layer in self.layers):
            ep, top_k = layout["ep"], m["top_k"]
            experts = m["routed_experts"] // ep
            top = n * top_k
            slots = -(-top // ep) * ep
            perm = torch.zeros(slots, dtype=torch.long)
            perm[:top] = torch.arange(top) // top_k
            base, extra = divmod(slots, experts)  # rows each local expert receives: balanced
            counts = [base + (1 if e < extra else 0) for e in range(experts)]
            offsets = [0]
            for c in counts:
                offsets.append(offsets[-1] + c)
            inter = m["moe_intermediate"] // layout["tp"]
            mb.update(
                perm=perm.to(dev),
                top=top,
                wflat=torch.zeros(slots, dtype=bf16, device=dev),
                send=torch.empty(slots, hidden, dtype=bf16, device=dev),
                gu=torch.empty(slots, 2 * inter, dtype=bf16, device=dev),
                act=torch.empty(slots, inter, dtype=bf16, device=dev),
                expert_out=torch.zeros(slots, hidden, dtype=bf16, device=dev),
            )
            # An emulated EP rank has no all-to-all: its rows stay where they are.
            exchange = self.ep_group is not None
            mb["recv"] = torch.empty_like(mb["send"]) if exchange else mb["send"]
            mb["back"] = torch.empty_like(mb["expert_out"]) if exchange else mb["expert_out"]
            runner = self.step_spec["runner"]
            if runner == FUSED_RUNNER:
                mb["fused"] = self._fused_setup(n, slots, counts, experts)
                return mb
            mb["run"] = backends.backend_of(runner).step_runner(runner, counts, self.kernels)
            ones = torch.ones(max(slots, 1), device=dev)
            mb["problems"] = [
                (
                    Problem(mb["recv"], layer["e_gate_up"], mb["gu"], ones, None, offsets),
                    Problem(mb["act"], layer["e_down"], mb["expert_out"], ones, None, offsets),
                )
                if layer["kind"] == "moe"
                else None
                for layer in self.layers
            ]
        return mb

    def _fused_setup(self, n: int, slots: int, counts: list[int], experts: int) -> dict:
        """Return the fused-MoE kernel's routing for one micro-batch: the pairs' experts (fixed,
        balanced), their row blocks (aligned once here: the step's graph replays them), and the
        config the tuned table or the engines' default picks for the GEMMs' M."""
        from tilesweep.kernels import fused_moe as fm

        torch, top_k = self.torch, self.model["top_k"]
        if self.layout["ep"] == 1:  # gate/up gathers each token's rows: M = n tokens, top-k
            pairs, m, k = n * top_k, n, top_k
            ids = (torch.arange(pairs) % experts).view(n, top_k)
        else:  # after the dispatch, one row per pair of this rank's experts: top-k 1
            pairs, m, k = slots, slots, 1
            ids = torch.repeat_interleave(torch.arange(experts), torch.tensor(counts)).view(-1, 1)
        config, source = moe_config(self.moe_table, m, experts)
        ids = ids.to(self.device)
        direct = pairs * self.moe_table.get("sparsity", 4) <= experts
        blocks = (
            fm.direct_blocks(ids, config["BLOCK_SIZE_M"])
            if direct
            else fm.align_blocks(ids, config["BLOCK_SIZE_M"], experts)
        )
        return {"config": config, "source": source, "blocks": blocks, "top_k": k, "pairs": pairs}

    def _fused_experts(self, x, layer: dict, mb: dict, clock: PartClock):
        """Run the routed experts through the project's fused-MoE kernel; return the combined
        output per token (EP: per received row, combined after the all-to-all)."""
        from tilesweep.kernels import fused_moe as fm

        torch, f = self.torch, mb["fused"]
        ep1 = self.layout["ep"] == 1
        a = x if ep1 else mb["recv"]
        with clock.part("expert_gemms"):
            fm.invoke(a, layer["e_gate_up"], mb["gu"], f["blocks"], f["config"],
                      top_k=f["top_k"], gather=ep1)  # fmt: skip
            half = mb["gu"].shape[1] // 2
            torch.mul(torch.nn.functional.silu(mb["gu"][:, :half]), mb["gu"][:, half:],
                      out=mb["act"])  # fmt: skip
            fm.invoke(mb["act"], layer["e_down"], mb["expert_out"], f["blocks"], f["config"],
                      top_k=f["top_k"], gather=False,
                      topk_weights=mb["wflat"][: f["pairs"]] if ep1 else None)  # fmt: skip
            clock.add_launches(2)
        if ep1:
            with clock.part("combine_sum"):
                return mb["expert_out"][: f["pairs"]].view(x.shape[0], f["top_k"], -1).sum(1)
        return None

    def _all_reduce(self, x, clock: PartClock, name: str) -> None:
        if self.tp_group is not None:
            with clock.part(name):
                self.dist.all_reduce(x, group=self.tp_group)

    def _attention(self, x, w: dict, cache: dict, clock: PartClock):
        """Return the attention output of one decode token per sequence over its cache."""
        torch, a = self.torch, self.model["attention"]
        sdpa = torch.nn.functional.scaled_dot_product_attention
        n = x.shape[0]
        if a["kind"] == "mla":
            nope, rope, lat = a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["kv_lora_rank"]
            heads = w["uk"].shape[0]
            with clock.part("attn_proj"):
                q_lat = _rms(torch, x @ w["q_a"].t(), w["q_norm"])
                q = (q_lat @ w["q_b"].t()).view(n, heads, nope + rope)
                cache["lat"][:, -1].copy_(x @ w["kv_a"].t())  # this token's latent and rope key
                q_abs = torch.einsum("nhd,hdc->nhc", q[..., :nope], w["uk"])
                query = torch.cat([q_abs, q[..., nope:]], dim=-1)
            keys = cache["lat"]
            if "iq" in w:
                with clock.part("attn_index"):
                    cache["idx"][:, -1].copy_(x @ w["ik"].t())
                    iq = (q_lat @ w["iq"].t()).view(n, a["index_n_heads"], a["index_head_dim"])
                    scores = torch.relu(torch.einsum("nhd,ntd->nht", iq, cache["idx"]))
                    weights = (x @ w["iw"].t()).unsqueeze(-1)
                    total = (scores * weights).sum(1)
                    k = min(a["index_topk"], keys.shape[1])
                    top = total.topk(k, dim=-1).indices
                    keys = torch.gather(keys, 1, top.unsqueeze(-1).expand(-1, -1, keys.shape[-1]))
            with clock.part("attn_core"):
                # One latent head shared by every query head: batched matmuls over the cache
                # (per sequence), never a per-head copy of it.
                scores = torch.bmm(query, keys.transpose(1, 2)) * (nope + rope) ** -0.5
                probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
                out = torch.bmm(probs, keys[..., :lat])
            with clock.part("attn_out"):
                o = torch.einsum("nhc,hcv->nhv", out, w["uv"]).reshape(n, -1)
                return o @ w["o"].t()
        hd = a["head_dim"]
        kvh = cache["k"].shape[1]
        heads = w["qkv"].shape[0] // hd - 2 * kvh
        with clock.part("attn_proj"):
            qkv = (x @ w["qkv"].t()).view(n, heads + 2 * kvh, hd)
            cache["k"][:, :, -1].copy_(qkv[:, heads : heads + kvh])
            cache["v"][:, :, -1].copy_(qkv[:, heads + kvh :])
        with clock.part("attn_core"):
            out = sdpa(qkv[:, :heads].unsqueeze(2), cache["k"], cache["v"], enable_gqa=True)
        with clock.part("attn_out"):
            return out.reshape(n, heads * hd) @ w["o"].t()

    def _ffn(self, x, layer: dict, mb: dict, index: int, clock: PartClock):
        """Return the dense FFN or MoE output for x (before the TP all-reduce)."""
        torch, dist = self.torch, self.dist
        silu = torch.nn.functional.silu
        if layer["kind"] == "dense":
            with clock.part("dense_mlp"):
                gu = x @ layer["gate_up"].t()
                half = gu.shape[1] // 2
                return (silu(gu[:, :half]) * gu[:, half:]) @ layer["down"].t()
        with clock.part("router"):
            logits = x @ layer["router"].t()
            top_w, _ = logits.topk(self.model["top_k"], dim=1)
            mb["wflat"][: mb["top"]].copy_(torch.softmax(top_w.float(), dim=1).view(-1))
        fused = "fused" in mb
        out = None
        if fused and self.layout["ep"] == 1:
            out = self._fused_experts(x, layer, mb, clock)
        else:
            with clock.part("permute"):
                torch.index_select(x, 0, mb["perm"], out=mb["send"])
            if self.ep_group is not None:
                with clock.part("dispatch"):
                    dist.all_to_all_single(mb["recv"], mb["send"], group=self.ep_group)
            if fused:
                self._fused_experts(x, layer, mb, clock)
            else:
                p_gu, p_dn = mb["problems"][index]
                with clock.part("expert_gemms"):
                    mb["run"](p_gu)
                    half = mb["gu"].shape[1] // 2
                    torch.mul(silu(mb["gu"][:, :half]), mb["gu"][:, half:], out=mb["act"])
                    mb["run"](p_dn)
            out = self._combine(x, mb, clock)
        if "s_gate_up" in layer:
            with clock.part("shared_expert"):
                gu = x @ layer["s_gate_up"].t()
                half = gu.shape[1] // 2
                out.addmm_(silu(gu[:, :half]) * gu[:, half:], layer["s_down"].t())
        return out

    def _combine(self, x, mb: dict, clock: PartClock):
        """Return the routed rows brought back (EP: all-to-all) and summed per token with their
        routing weights."""
        torch, dist = self.torch, self.dist
        if self.ep_group is not None:
            with clock.part("combine"):
                dist.all_to_all_single(mb["back"], mb["expert_out"], group=self.ep_group)
        with clock.part("combine_sum"):
            mb["back"].mul_(mb["wflat"][:, None])
            out = torch.zeros_like(x)
            out.index_add_(0, mb["perm"], mb["back"])
        return out

    def compute(self, mb: dict, clock: PartClock) -> None:
        """Run this stage's layers on one micro-batch: embedding first, LM head last."""
        torch = self.torch
        if mb["n"] == 0:
            return
        h = mb["x"]
        if self.first:
            with clock.part("embedding"):
                torch.index_select(self.embed, 0, mb["ids"], out=h)
        else:
            with clock.part("residual"):
                h.copy_(mb["h_in"])
        for index, (layer, cache) in enumerate(zip(self.layers, mb["caches"], strict=True)):
            with clock.part("norms"):
                xn = _rms(torch, h, layer["norm1"])
            attn = self._attention(xn, layer["attn"], cache, clock)
            self._all_reduce(attn, clock, "attn_all_reduce")
            with clock.part("residual"):
                h.add_(attn)
            with clock.part("norms"):
                xn = _rms(torch, h, layer["norm2"])
            out = self._ffn(xn, layer, mb, index, clock)
            self._all_reduce(out, clock, "ffn_all_reduce")
            with clock.part("residual"):
                h.add_(out)
        if self.last:
            with clock.part("lm_head"):
                logits = _rms(torch, h, self.final_norm) @ self.lm_head.t()
                best, ids = logits.float().max(dim=1)
                ids += self.at["tp_index"] * self.lm_head.shape[0]
            if self.tp_group is not None:
                with clock.part("lm_head_gather"):
                    both = torch.stack([best, ids.float()])
                    gathered = [torch.empty_like(both) for _ in self.tp_ranks]
                    self.dist.all_gather(gathered, both, group=self.tp_group)
                    stacked = torch.stack(gathered)  # tp, 2, n
                    ids = stacked[:, 1].gather(0, stacked[:, 0].argmax(0, keepdim=True))[0].long()
            mb["ids"].copy_(ids.clamp_(0, self.model["vocab"] - 1))

    def _hand_on(self, sent: dict, received: dict) -> None:
        """Ring hand-off after a slot: activations to the next stage, tokens from last to first."""
        dist, layout = self.dist, self.layout
        pp, per_stage, stage = layout["pp"], layout["tp"] * layout["ep"], self.at["stage"]
        nxt = self.rank + per_stage if stage < pp - 1 else self.rank - (pp - 1) * per_stage
        prv = self.rank - per_stage if stage > 0 else self.rank + (pp - 1) * per_stage
        out = sent["ids"] if self.last else sent["x"]
        into = received["ids"] if self.first else received["h_in"]
        if out.shape[0] == 0 and into.shape[0] == 0:
            return
        ops = [dist.P2POp(dist.isend, out, nxt), dist.P2POp(dist.irecv, into, prv)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    def one_step(self, mbs: list[dict], slot: int, clock: PartClock) -> int:
        """Run the pp slots of one decode step from `slot`; return the next slot."""
        pp, stage = self.layout["pp"], self.at["stage"]
        for _ in range(pp):
            here = mbs[(slot - stage) % pp]
            self.compute(here, clock)
            if pp > 1 and not self.emulated:
                with clock.part("pp_send_recv"):
                    self._hand_on(here, mbs[(slot + 1 - stage) % pp])
            slot += 1
        return slot

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
        self.dist.barrier()

    def fits(self, batch: int) -> str:
        """Return why a batch's caches do not fit on every rank's device ('' when they do)."""
        if not self.cuda:
            return ""
        torch, layers = self.torch, len(self.layers)
        ctx = self.step_spec["context_len"]
        need = local_sequences(batch, self.layout) * cache_bytes_per_sequence(
            self.model, self.layout, ctx, layers
        )
        free, _ = torch.cuda.mem_get_info(self.device)
        ok = torch.tensor([1 if need <= MEMORY_SHARE * free else 0], device=self.device)
        self.dist.all_reduce(ok, op=self.dist.ReduceOp.MIN)
        if ok.item():
            return ""
        return (
            f"KV caches of batch {batch} at context {ctx} need {need / 2**30:.1f} GiB per rank; "
            f"{MEMORY_SHARE:.0%} of the free {free / 2**30:.1f} GiB is the limit"
        )

    def run_batch(self, batch: int, warmup: int, repeats: int) -> dict:
        """Return whole-step times (the slowest rank's), part times, launches per part and a
        finiteness check. On a GPU in graph mode the step is captured in a CUDA graph, as the
        engines run decode, and its replays are timed; the eager step is timed beside it."""
        torch = self.torch
        short = self.fits(batch)
        if short:
            return {"batch": batch, "skipped": short}
        mbs = [self._micro_batch(n) for n in micro_batches(batch, self.layout)]
        off = PartClock(torch, self.cuda, mode="off")
        slot = 0
        for _ in range(warmup):
            self._sync()
            slot = self.one_step(mbs, slot, off)
        launches, slot = self._count_launches(mbs, slot)
        eager, slot = self._time_steps(mbs, slot, repeats, None)
        out = {"batch": batch, "micro_batches": [mb["n"] for mb in mbs], "launches": launches}
        graphed = self.cuda and self.step_spec.get("mode", "graph") == "graph"
        if graphed:
            try:
                whole, parted, clock, slot = self._capture(mbs, slot)
            except Exception as exc:  # a step that cannot be captured says why, and stays eager
                graphed = False
                out["graph_error"] = (
                    str(exc).strip().splitlines()[-1][:300] if str(exc) else repr(exc)
                )
        if graphed:
            times, _ = self._time_steps(mbs, slot, repeats, whole)
            part_samples = []
            for _ in range(repeats):
                self._sync()
                parted.replay()
                part_samples.append(clock.collect())
            out.update(whole_ms=times, eager_ms=eager, timing="cuda-graph")
            del whole, parted
        else:
            part_clock, part_samples = PartClock(torch, self.cuda), []
            for _ in range(repeats):
                self._sync()
                slot = self.one_step(mbs, slot, part_clock)
                part_samples.append(part_clock.collect())
            out.update(whole_ms=eager, eager_ms=eager, timing="eager")
        out["parts"] = part_samples
        out["finite"] = all(bool(torch.isfinite(mb["x"]).all().item()) for mb in mbs)
        out["moe_config"] = next((mb["fused"]["source"] for mb in mbs if "fused" in mb), "")
        del mbs
        if self.cuda:
            torch.cuda.empty_cache()
        return out

    def _count_launches(self, mbs: list[dict], slot: int) -> tuple[dict[str, int], int]:
        """Return ({part: launches in one step}, next slot) from one eager step under a
        LaunchCounter."""
        from tilesweep.measure.launch_count import make_counter

        counter = make_counter()
        self._sync()
        with counter:
            slot = self.one_step(mbs, slot, PartClock(self.torch, self.cuda, "count", counter))
        return counter.counts, slot

    def _time_steps(self, mbs: list[dict], slot: int, repeats: int, graph) -> tuple[list, int]:
        """Return (the slowest rank's ms per step over repeats, next slot): graph replays when a
        graph is given, else eager steps."""
        torch = self.torch
        off = PartClock(torch, self.cuda, mode="off")
        times = []
        for _ in range(repeats):
            self._sync()
            if self.cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                if graph is None:
                    slot = self.one_step(mbs, slot, off)
                else:
                    graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                slot = self.one_step(mbs, slot, off)
                times.append((time.perf_counter() - began) * 1e3)
        slowest = torch.tensor(times, dtype=torch.float64, device=self.device)
        self.dist.all_reduce(slowest, op=self.dist.ReduceOp.MAX)
        return slowest.tolist(), slot

    def _capture(self, mbs: list[dict], slot: int):
        """Return (the step's graph, the same step's graph with timing events around every
        part, the clock holding those events, next slot), captured after warm-up steps on a
        side stream as torch asks."""
        torch = self.torch
        off = PartClock(torch, True, mode="off")
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                slot = self.one_step(mbs, slot, off)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._sync()
        whole = torch.cuda.CUDAGraph()
        with torch.cuda.graph(whole):
            slot = self.one_step(mbs, slot, off)
        clock = PartClock(torch, True, mode="graph")
        parted = torch.cuda.CUDAGraph()
        with torch.cuda.graph(parted):
            slot = self.one_step(mbs, slot, clock)
        self._sync()
        return whole, parted, clock, slot


def _worker(rank: int, world: int, port: int, spec: dict, cuda: bool, out_dir: str) -> None:
    """Run every batch of the spec on one rank; write this rank's results as JSON."""
    torch, dist = init_rank(rank, world, port, cuda)
    try:
        me = _StepRank(torch, dist, rank, spec, cuda)
        step = spec["step"]
        batches = [me.run_batch(b, step["warmup"], step["repeats"]) for b in step["batches"]]
        result = {"rank": rank, **me.at, "batches": batches}
        me._sync()
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))


def run_whole_step(spec: dict, world: int, cuda: bool, timeout_s: float) -> list[dict]:
    """Return every rank's results for the spec's batches, run over `world` processes.

    Raises TimeoutError (after killing the ranks) when they run past timeout_s, and
    torch.multiprocessing's ProcessRaisedException when a rank fails.
    """
    import torch.multiprocessing as mp

    os.environ.update(SAFE_NCCL_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(
            _worker,
            args=(world, free_port(), spec, cuda, tmp),
            nprocs=world,
            join=False,
            start_method="spawn" if cuda else "fork",
        )
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    if proc.is_alive():
                        proc.kill()
                raise TimeoutError(f"whole step ran past {timeout_s:.0f} s; its ranks were killed")
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]


def percentile(values: list[float], q: float) -> float:
    """Return the q-quantile (0..1) of values by nearest rank; NaN for none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def step_rows(ranks: list[dict], spec: dict, layout_name: str) -> list[dict]:
    """Return one table row per batch: the whole step's p10/p50/p90 (the slowest rank's), each
    part's median on the rank that spent longest in compute, and what was run."""
    step, model = spec["step"], spec["model"]
    shape = (
        f"{step['dense_layers']} dense + {step['moe_layers']} MoE layers per stage, "
        f"context {step['context_len']}, bf16"
    )
    if spec.get("emulate"):
        world = spec["layout"]["tp"] * spec["layout"]["pp"] * spec["layout"]["ep"]
        label = (
            f"measured (one rank emulated: rank {emulated_rank(spec['layout'])} of {world}, "
            f"collectives left out; {shape})"
        )
    else:
        label = f"measured ({shape})"
    rows = []
    for index, batch in enumerate(step["batches"]):
        skipped = ranks[0]["batches"][index].get("skipped")
        if skipped:
            rows.append({"layout": layout_name, "batch": batch, "status": "skipped",
                         "reason": skipped})  # fmt: skip
            continue
        whole = ranks[0]["batches"][index]["whole_ms"]  # already the max over ranks
        row = {
            "layout": layout_name,
            **{k: spec["layout"][k] for k in ("tp", "pp", "ep")},
            "batch": batch,
            "sequences_run": local_sequences(batch, spec["layout"]) * spec["layout"]["ep"],
            "context_len": step["context_len"],
            "dense_layers_run": step["dense_layers"],
            "moe_layers_run": step["moe_layers"],
            "routed_experts_run": model["routed_experts"],
            "top_k_run": model["top_k"],
            "vocab_run": model["vocab"],
            "runner": step["runner"],
            "step_ms": percentile(whole, 0.5),
            "step_p10_ms": percentile(whole, 0.1),
            "step_p90_ms": percentile(whole, 0.9),
            "repeats": len(whole),
            "finite": all(r["batches"][index]["finite"] for r in ranks),
            "measured_label": label,
            "emulated": bool(spec.get("emulate")),
            "timing": ranks[0]["batches"][index]["timing"],
            "eager_step_ms": percentile(ranks[0]["batches"][index]["eager_ms"], 0.5),
            "graph_error": ranks[0]["batches"][index].get("graph_error", ""),
            "moe_config": ranks[0]["batches"][index].get("moe_config", ""),
        }
        launches = max(
            (r["batches"][index]["launches"] for r in ranks), key=lambda c: sum(c.values())
        )
        row["launches"] = sum(launches.values())
        row.update({f"launches_{name}": n for name, n in sorted(launches.items())})
        per_rank = []
        for rank in ranks:
            names = {n for sample in rank["batches"][index]["parts"] for n in sample}
            medians = {
                n: percentile([s.get(n, 0.0) for s in rank["batches"][index]["parts"]], 0.5)
                for n in names
            }
            per_rank.append(medians)
        busiest = max(per_rank, key=lambda parts: sum(parts.values()))
        row.update({f"part_{name}_ms": ms for name, ms in sorted(busiest.items())})
        row["status"] = "ok" if row["finite"] else "correctness"
        row["reason"] = "" if row["finite"] else "non-finite activations after the step"
        rows.append(row)
    return rows
