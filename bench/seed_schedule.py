"""The seed's serving benchmark as an engine schedules it: chunked prefill under a token budget.

The schedule itself is defined once, in C++ (tools/seed_schedule.cc): build_schedule() reads it
from `mlakit-bench seed --print-schedule` ($MLAKIT_BENCH, else build*/mlakit-bench of this
checkout), with each step's graph bucket and useful FLOP. This module adds what only the Python
benchmarks need (paged block tables, TTFT statistics). No torch needed:

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
import functools
import glob
import json
import math
import os
import random
import subprocess
from typing import Dict, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Rows per CUDA-graph bucket above 1024 (mlakit.graph_rows_bucket's step_above; 256-row steps below).
GRAPH_BUCKET_STEP_ABOVE = 256


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
    graph_rows: int = 0   # mlakit.graph_rows_bucket(tokens + context, workspace rows, bucket step)
    flops: Optional[Dict[str, float]] = None  # useful work of one layer: attention, up_projection

    @property
    def tokens(self) -> int:
        return sum(c.new for c in self.chunks)

    @property
    def context_tokens(self) -> int:
        return sum(c.ctx for c in self.chunks)

    @property
    def batch(self) -> int:
        return len(self.chunks)


def bench_binary() -> str:
    """mlakit-bench: $MLAKIT_BENCH, else the newest build*/mlakit-bench of this checkout."""
    env = os.environ.get("MLAKIT_BENCH")
    if env:
        return env
    found = sorted(glob.glob(os.path.join(REPO, "build*", "mlakit-bench")), key=os.path.getmtime, reverse=True)
    if not found:
        raise RuntimeError("the seed's schedule is defined by mlakit-bench (tools/seed_schedule.cc): build it "
                           "(cmake --build build --target mlakit-bench) or set MLAKIT_BENCH")
    return found[0]


@functools.lru_cache(maxsize=None)
def _schedule_json(prompts: tuple, budget: int, bucket_step: int, heads: int) -> dict:
    cmd = [bench_binary(), "seed", "--print-schedule", "--prompts", ",".join(map(str, prompts)),
           "--budgets", str(budget), "--bucket-step", str(bucket_step), "--heads", str(heads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ValueError(f"{' '.join(cmd[1:4])} ...: {proc.stderr.strip() or proc.stdout.strip()}")
    return json.loads(proc.stdout)


def build_schedule(prompt_lens: Sequence[int], budget: int, bucket_step: int = GRAPH_BUCKET_STEP_ABOVE,
                   heads: int = 16) -> List[Step]:
    """The prefill steps of requests with these prompt lengths, all arriving at time 0, with each
    step's graph bucket (under the workspace of budget + largest context rows) and its useful
    FLOP at `heads` heads (DeepSeek-Coder-V2-Lite's other widths)."""
    if budget < 1:
        raise ValueError("budget must be >= 1")
    d = _schedule_json(tuple(int(n) for n in prompt_lens), int(budget), int(bucket_step), int(heads))
    return [Step(i, [Chunk(*e) for e in st["entries"]], st["graph_rows"], st["flops"])
            for i, st in enumerate(d["steps"])]


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


def schedule_flops(steps: Sequence[Step], layers: int) -> Dict[str, float]:
    """The steps' useful work (tools/seed_schedule.cc's seed_step_flops) over `layers` layers,
    with its total."""
    out = {"attention": 0.0, "up_projection": 0.0}
    for st in steps:
        for k in out:
            out[k] += layers * st.flops[k]
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
    steps = build_schedule([args.prompt] * args.requests, args.budget, args.bucket_step)
    print(f"{args.requests} x {args.prompt} tokens, budget {args.budget}: {len(steps)} steps")
    print(describe(steps))
    rows = [st.tokens + st.context_tokens for st in steps]
    padded = [st.graph_rows for st in steps]
    print(f"CUDA-graph buckets (graph_rows): {sorted(set(padded))}; "
          f"rows padded {100.0 * (sum(padded) / sum(rows) - 1):.1f}%")


if __name__ == "__main__":
    main()
