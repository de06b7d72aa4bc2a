"""One rank of the measured whole step: its layout place, groups, weights, micro-batches (token
buffers, KV caches, balanced routing, the experts' runner) and one decode step."""

import itertools

from tilesweep import backends
from tilesweep.measure.gemm_case import Problem
from tilesweep.measure.step import extras as step_extras
from tilesweep.measure.step.attention import attention, kernels_label, rms
from tilesweep.measure.step.clock import PartClock
from tilesweep.measure.step.extras import LAYER_PART, STEP_PART
from tilesweep.measure.step.moe import ffn
from tilesweep.measure.step.shapes import (
    MEMORY_SHARE,
    cache_bytes_per_sequence,
    emulated_rank,
    local_sequences,
)
from tilesweep.measure.step.weights import WeightMaker, random_bf16, stage_weights
from tilesweep.plan.sharding import coords, group_ranks


def _cache_shapes(a: dict, n: int, ctx: int, tp: int) -> dict[str, tuple]:
    """Return one layer's KV cache shapes for n sequences of ctx tokens."""
    if a["kind"] == "mla":
        shapes = {"lat": (n, ctx, a["kv_lora_rank"] + a["qk_rope_head_dim"])}
        if a.get("index_topk"):
            shapes["idx"] = (n, ctx, a["index_head_dim"])
        return shapes
    kvh = max(1, a["kv_heads"] // tp)
    return {"k": (n, kvh, ctx, a["head_dim"]), "v": (n, kvh, ctx, a["head_dim"])}


class StepRank:
    """One rank's share of the reduced model, its caches and buffers; runs decode steps."""

    def __init__(self, torch, dist, rank: int, spec: dict, cuda: bool):
        self.torch, self.dist, self.cuda = torch, dist, cuda
        self.layout, self.model, self.step_spec = spec["layout"], spec["model"], spec["step"]
        self.kernels = spec.get("kernels", {})
        self.moe_table = spec.get("moe_table") or {}
        # The engines' fused kernels around the GEMMs on a GPU (step.fused), else torch's ops.
        self.fused = cuda and bool(self.step_spec.get("fused", True))
        self.kernels_label = kernels_label(spec["model"]["attention"], self.fused)
        # The engine's extra kernels (measure.step.extras); None: the lean step.
        self.extras: dict | None = None
        # One rank of a larger layout run alone, without its collectives and hand-offs.
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
        make = WeightMaker(torch, self.device, self.gen, self.shared_gen)
        weights = stage_weights(
            make, self.model, self.layout, self.step_spec, self.first, self.last
        )
        self.layers = weights["layers"]
        self.embed = weights.get("embed")
        self.final_norm, self.lm_head = weights.get("final_norm"), weights.get("lm_head")

    def use_kernel_list(self, name: str) -> None:
        """Run the `lean` step, or it plus the engine's extras, from the next step on."""
        self.extras = self.step_spec["engine_list"] if name == step_extras.ENGINE else None

    def micro_batch(self, n: int) -> dict:
        """Return the buffers and caches of one micro-batch of n sequences on this rank."""
        torch, m, layout, dev = self.torch, self.model, self.layout, self.device
        a, ctx, hidden = m["attention"], self.step_spec["context_len"], m["hidden"]
        bf16 = torch.bfloat16
        mb = {"n": n, "ids": torch.randint(0, m["vocab"], (n,), device=dev)}
        mb["x"] = torch.empty(n, hidden, dtype=bf16, device=dev)
        mb["h_in"] = random_bf16(torch, (n, hidden), dev, self.gen)
        mb["caches"] = []
        for _ in self.layers:
            shapes = _cache_shapes(a, n, ctx, layout["tp"])
            cache = {key: random_bf16(torch, shape, dev, self.gen) for key, shape in shapes.items()}
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
            offsets = [0, *itertools.accumulate(counts)]
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
            stepper = backends.step_backend(runner).stepper
            if stepper.fused:  # the step runner's own routing and kernel (StepRunner.fused_setup)
                mb["fused"] = stepper.fused_setup(self, n, slots, counts, experts)
                return mb
            mb["run"] = stepper.step_runner(runner, counts, self.kernels)
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

    def _all_reduce(self, x, clock: PartClock, name: str) -> None:
        if self.tp_group is not None:
            with clock.part(name):
                self.dist.all_reduce(x, group=self.tp_group)

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
        pending = None  # fused: the last FFN output, added into h by the next norm's kernel
        for index, (layer, cache) in enumerate(zip(self.layers, mb["caches"], strict=True)):
            xn = self._add_norm(h, pending, layer["norm1"], clock)
            if self.extras is not None:
                step_extras.launch(self, xn, self.extras["layers"][index], clock, LAYER_PART)
            attn = attention(
                torch, self.model["attention"], xn, layer["attn"], cache, clock, self.fused
            )
            self._all_reduce(attn, clock, "attn_all_reduce")
            xn = self._add_norm(h, attn, layer["norm2"], clock)
            out = ffn(self, xn, layer, mb, index, clock)
            self._all_reduce(out, clock, "ffn_all_reduce")
            pending = out
            if not self.fused:
                with clock.part("residual"):
                    h.add_(out)
                pending = None
        if self.last:
            self._lm_head(h, pending, mb, clock)
        elif pending is not None:
            with clock.part("residual"):
                h.add_(pending)

    def _add_norm(self, h, y, weight, clock: PartClock, part: str = "norms"):
        """Return RMSNorm(h + y) x weight, timed as `part` (y None: the norm alone)."""
        torch = self.torch
        if self.fused:  # one kernel: with y added first, or (the first norm) without
            # triton (via kernels.step_fused): this module loads without it
            from tilesweep.kernels.step_fused import add_rms_norm, rms_norm

            with clock.part(part):
                out = rms_norm(torch, h, weight) if y is None else add_rms_norm(torch, h, y, weight)
                clock.add_launches(1)
            return out
        if y is not None:
            with clock.part("residual"):
                h.add_(y)
        with clock.part(part):
            return rms(torch, h, weight)

    def _lm_head(self, h, pending, mb: dict, clock: PartClock) -> None:
        """Pick each sequence's next token into mb["ids"]; `pending`: FFN output to add."""
        torch = self.torch
        xn = self._add_norm(h, pending, self.final_norm, clock, "lm_head")
        with clock.part("lm_head"):
            logits = xn @ self.lm_head.t()
            best, ids = logits.float().max(dim=1)
            ids += self.at["tp_index"] * self.lm_head.shape[0]
        if self.extras is not None:
            step_extras.launch(self, xn, self.extras["step"], clock, STEP_PART)
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

    def sync(self) -> None:
        """Wait for this rank's device, then for every rank."""
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
