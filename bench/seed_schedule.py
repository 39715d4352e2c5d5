"""The seed's serving benchmark as an engine schedules it: chunked prefill under a token budget.

Plain Python (no torch), so the schedule can be built and printed anywhere:

    python3 bench/seed_schedule.py --requests 100 --budget 8192

The seed (shared/seed/000_*.txt) benchmarked vLLM serving DeepSeek-Coder-V2-Lite with N requests of
999 prompt tokens sent at once (N = 1 and N = 100), chunked prefill with an 8192-token budget per
step. vLLM's v1 scheduler fills each step's budget first with the requests already running (a
request whose prompt was cut at the previous step's budget continues with its remaining tokens;
what it already prefilled is its *context*, read back from the paged latent cache), then admits
waiting requests first come, first served, each taking min(its remaining tokens, budget left).

Only prefill tokens are scheduled: the decode tokens of requests that finished their prompt
(1 token each per step in vLLM) run through MLA's decode kernel, not prefill attention, and are
left out here as in the anchors' measurement (N = 100: 13 steps at 8192, 49 at 2048).

A request's prompt ends in step s: its first token comes out at the end of step s, so the
prefill-attention share of its time to first token is the sum of the times of steps 0..s.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import random
from typing import Dict, List, Sequence


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Part of one request's prompt processed in one step."""
    req: int   # request id (admission order)
    ctx: int   # tokens of this request already in the cache (attended, not recomputed)
    new: int   # prompt tokens processed in this step
    last: bool  # this chunk ends the prompt: the request's first token follows this step


@dataclasses.dataclass
class Step:
    index: int
    chunks: List[Chunk]

    @property
    def tokens(self) -> int:
        return sum(c.new for c in self.chunks)

    @property
    def context_tokens(self) -> int:
        return sum(c.ctx for c in self.chunks)

    @property
    def batch(self) -> int:
        return len(self.chunks)


def build_schedule(prompt_lens: Sequence[int], budget: int) -> List[Step]:
    """The prefill steps of requests with these prompt lengths, all arriving at time 0."""
    if budget < 1:
        raise ValueError("budget must be >= 1")
    done = [0] * len(prompt_lens)      # tokens already prefilled per request
    running: List[int] = []            # admitted, prompt not finished (FCFS order)
    waiting = list(range(len(prompt_lens)))
    steps: List[Step] = []
    while running or waiting:
        left = budget
        chunks = []
        for r in running:
            if left == 0:
                break
            n = min(prompt_lens[r] - done[r], left)
            chunks.append(Chunk(r, done[r], n, done[r] + n == prompt_lens[r]))
            done[r] += n
            left -= n
        while waiting and left > 0:
            r = waiting.pop(0)
            running.append(r)
            n = min(prompt_lens[r], left)
            chunks.append(Chunk(r, 0, n, n == prompt_lens[r]))
            done[r] += n
            left -= n
        running = [r for r in running if done[r] < prompt_lens[r]]
        steps.append(Step(len(steps), chunks))
    return steps


class BlockTables:
    """Paged cache blocks of block_size tokens, handed out from a shuffled free list (seeded) when
    a request is admitted, as many as its prompt needs, so one request's blocks are scattered
    over the cache as in a warmed-up engine."""

    def __init__(self, prompt_lens: Sequence[int], block_size: int, seed: int = 0, spare_blocks: int = 0):
        self.block_size = block_size
        need = [math.ceil(n / block_size) for n in prompt_lens]
        self.num_blocks = sum(need) + spare_blocks
        free = list(range(self.num_blocks))
        random.Random(seed).shuffle(free)
        self.tables: Dict[int, List[int]] = {}
        for r, k in enumerate(need):
            self.tables[r], free = free[:k], free[k:]
        self.max_blocks = max(need) if need else 0

    def slot(self, req: int, pos: int) -> int:
        """Cache slot (block * block_size + offset) of token `pos` of request `req`."""
        return self.tables[req][pos // self.block_size] * self.block_size + pos % self.block_size

    def slots(self, req: int, start: int, count: int) -> List[int]:
        return [self.slot(req, p) for p in range(start, start + count)]


# CUDA-graph buckets. A graph-replayed MLA step (mlakit.MlaStep plan(..., graph_rows=G)) sizes its
# gather and up-projection launches for G rows on the host, so one captured graph serves every
# step with context + new tokens <= G; a G far above the step's rows wastes up-projection work
# (N=1 at budget 8192 planned with G = budget + context ran 2x slower than eager on the H200).
# Engines therefore capture one graph per bucket of token counts (vLLM: 1, 2, 4, multiples of 8 to
# 256, then of 16 to 512, for decode; larger steps run eagerly). Prefill steps are large, so the
# buckets here are coarser: multiples of 256 rows, up to 1024 and then of `step_above` (256 by
# default), never above the cap (the step's workspace rows = budget + largest context, where
# every step fits). The padding is up-projection and gather work on rows nothing reads (attention
# runs the plan's lengths); tools/seed_schedule.h gives what it costs at each step size.
# The same rule and constants are in tools/seed_schedule.{h,cc} (graph_bucket), so C++ and Python
# replay alike.
GRAPH_BUCKET_FINE, GRAPH_BUCKET_FINE_UNTIL, GRAPH_BUCKET_STEP_ABOVE = 256, 1024, 256


def graph_bucket(rows: int, cap: int, step_above: int = GRAPH_BUCKET_STEP_ABOVE) -> int:
    """The graph_rows bucket of a step attending `rows` rows (context + new tokens), <= cap."""
    if rows > cap:
        raise ValueError(f"step rows {rows} exceed the graph cap {cap}")
    if step_above < 1:
        raise ValueError(f"step_above must be positive, got {step_above}")
    unit = GRAPH_BUCKET_FINE if rows <= GRAPH_BUCKET_FINE_UNTIL else step_above
    return min(cap, max(unit, -(-rows // unit) * unit))


@dataclasses.dataclass(frozen=True)
class MlaDims:
    """Per-head widths of the MLA step (DeepSeek-Coder-V2-Lite and -V3 share them)."""
    heads: int = 16
    latent: int = 512   # kv_lora_rank
    nope: int = 128     # qk_nope_head_dim
    rope: int = 64      # qk_rope_head_dim
    v: int = 128        # v_head_dim


def step_flops(step: Step, dims: MlaDims = MlaDims()) -> Dict[str, int]:
    """The useful work of one layer of a step, in FLOP, the same for every path that computes it:
    attention counts visible (query, key) pairs only (a new token at position p of its request
    sees p + 1 keys: its context and the new tokens up to itself), 2 x (nope + rope) for Q K^T and
    2 x v for P V per pair and head; the up-projection counts the real rows (context + new tokens,
    no bucket padding), 2 x latent x heads x (nope + v) each. tools/seed_schedule.cc
    (seed_step_flops) counts the same."""
    pairs = sum(c.new * c.ctx + c.new * (c.new + 1) // 2 for c in step.chunks)
    rows = step.tokens + step.context_tokens
    return {"attention": 2 * pairs * dims.heads * (dims.nope + dims.rope + dims.v),
            "up_projection": 2 * rows * dims.latent * dims.heads * (dims.nope + dims.v)}


def schedule_flops(steps: Sequence[Step], layers: int, dims: MlaDims = MlaDims()) -> Dict[str, int]:
    """step_flops summed over the schedule and `layers` layers, with their total."""
    out = {"attention": 0, "up_projection": 0}
    for st in steps:
        for k, v in step_flops(st, dims).items():
            out[k] += layers * v
    out["total"] = out["attention"] + out["up_projection"]
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (NumPy's default), as vLLM's benchmark."""
    v = sorted(values)
    if not v:
        return float("nan")
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def ttft_per_request(steps: Sequence[Step], step_ms: Sequence[float]) -> Dict[int, float]:
    """{request: sum of the times of the steps up to and including the one ending its prompt}."""
    out, t = {}, 0.0
    for st, ms in zip(steps, step_ms):
        t += ms
        for c in st.chunks:
            if c.last:
                out[c.req] = t
    return out


def ttft_stats(ttft: Dict[int, float]) -> Dict[str, float]:
    vals = list(ttft.values())
    return {"mean_ms": sum(vals) / len(vals) if vals else float("nan"),
            "median_ms": percentile(vals, 50), "p99_ms": percentile(vals, 99)}


def describe(steps: Sequence[Step]) -> str:
    lines = []
    for st in steps:
        parts = [f"r{c.req}:{c.new}" + (f"(+{c.ctx} ctx)" if c.ctx else "") for c in st.chunks]
        if len(parts) > 6:
            parts = parts[:3] + ["..."] + parts[-2:]
        lines.append(f"  step {st.index:3d}: {st.tokens:5d} tokens, {st.batch:3d} requests, "
                     f"{st.context_tokens:5d} context  " + " ".join(parts))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--prompt", type=int, default=999)
    ap.add_argument("--budget", type=int, default=8192)
    ap.add_argument("--bucket-step", type=int, default=GRAPH_BUCKET_STEP_ABOVE,
                    help="rows per CUDA-graph bucket above 1024")
    args = ap.parse_args()
    steps = build_schedule([args.prompt] * args.requests, args.budget)
    print(f"{args.requests} x {args.prompt} tokens, budget {args.budget}: {len(steps)} steps")
    print(describe(steps))
    cap = args.budget + max(st.context_tokens for st in steps)
    rows = [st.tokens + st.context_tokens for st in steps]
    padded = [graph_bucket(r, cap, args.bucket_step) for r in rows]
    print(f"CUDA-graph buckets (graph_rows, cap {cap}): {sorted(set(padded))}; "
          f"rows padded {100.0 * (sum(padded) / sum(rows) - 1):.1f}%")


if __name__ == "__main__":
    main()
