"""Named attention workloads shared by the Python benchmark scripts.

Read from bench/workloads.txt, the one definition that mlakit-bench compiles in too. All workloads
are DeepSeek MLA prefill shapes: (Dqk, Dvo) = (192, 128), bf16, H = 16 unless stated.
Plain Python (no numpy/torch) so any script can import it.
"""
from __future__ import annotations

import dataclasses
import os
from typing import List, Optional

WORKLOADS_TXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads.txt")


@dataclasses.dataclass
class Workload:
    name: str
    q_lens: List[int]
    kv_lens: List[int]
    causal: bool
    heads: int = 16
    kv_heads: int = 16
    dqk: int = 192
    dvo: int = 128
    dtype: str = "bf16"
    window_left: int = -1
    scale_divisor: int = 1

    @property
    def batch(self) -> int:
        return len(self.q_lens)

    @property
    def total_q(self) -> int:
        return sum(self.q_lens)

    @property
    def total_kv(self) -> int:
        return sum(self.kv_lens)

    def qo_indptr(self) -> List[int]:
        return _prefix(self.q_lens)

    def kv_indptr(self) -> List[int]:
        return _prefix(self.kv_lens)

    @property
    def equal_lengths(self) -> bool:
        """True when a dense [B, L, H, D] batch holds this workload exactly (no padding)."""
        return len(set(self.q_lens)) == 1 and len(set(self.kv_lens)) == 1

    def visible_pairs(self) -> int:
        """Unmasked (query, key) pairs per head, with mlakit's masking (prefill.h):
        causal aligned bottom-right, optional sliding window to the left."""
        total = 0
        for lq, lk in zip(self.q_lens, self.kv_lens):
            for i in range(lq):
                diag = lk - lq + i
                hi = min(diag, lk - 1) if self.causal else lk - 1
                lo = max(0, diag - self.window_left) if self.window_left >= 0 else 0
                total += max(0, hi - lo + 1)
        return total

    def flops(self) -> float:
        """2 * (Dqk + Dvo) * visible_pairs * H: the QK^T and PV products, masked pairs excluded."""
        return 2.0 * (self.dqk + self.dvo) * self.visible_pairs() * self.heads

    def bytes_per_set(self, elem: int = 2) -> int:
        """Bytes of q, k, v and out for one input set."""
        q = self.total_q * self.heads * self.dqk
        k = self.total_kv * self.kv_heads * self.dqk
        v = self.total_kv * self.kv_heads * self.dvo
        o = self.total_q * self.heads * self.dvo
        return elem * (q + k + v + o)


def _prefix(lens: List[int]) -> List[int]:
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


def parse_workloads(text: str) -> List[Workload]:
    """Workloads in bench/workloads.txt's format: name, q lengths, kv lengths (--lens syntax),
    causal or non-causal, heads; '#' starts a comment."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 5:
            raise ValueError(f"workloads line {n}: want name, q lengths, kv lengths, mask, heads")
        name, q, kv, mask, heads = fields
        if mask not in ("causal", "non-causal"):
            raise ValueError(f"workloads line {n}: mask is causal or non-causal, got {mask!r}")
        ql, kvl = parse_lens(q), parse_lens(kv)
        if len(ql) != len(kvl):
            raise ValueError(f"workloads line {n}: as many q as kv lengths")
        h = int(heads)
        out.append(Workload(name, ql, kvl, causal=mask == "causal", heads=h, kv_heads=h))
    return out


def named_workloads() -> List[Workload]:
    """The named workloads, in the order `--all` runs them (same as mlakit-bench)."""
    with open(WORKLOADS_TXT, encoding="utf-8") as f:
        return parse_workloads(f.read())


# Names the anchors file (peers-h200-2026-12-02.json) uses for the same shapes.
ANCHOR_CASE = {
    "1x999": "seed_bs1_999",
    "8x999+200": "step8k_8x999+200",
    "100x999": "bs100_999_one_launch",
    "1x16384": "long_16k",
    "1x32768": "long_32k_noncausal",
    "ctx_8x1024_vs_4096": "ctx_8x1024_vs_4096",
    "v3_128h_4096": "v3_128h_4096",
    "ctx_799_vs_200": "ctx_chunk_799x200",
}

# Row names of the second anchors file (peers-h200-2026-12-02-b.json: FlashInfer fa3/fa2, FA4,
# cuDNN and mlakit 775805f measured in one run) for the same shapes.
ANCHOR_B_ROW = {
    "1x999": "1x999 causal",
    "8x999+200": "8x999+200 causal",
    "100x999": "100x999 causal",
    "1x16384": "1x16384 causal",
    "1x32768": "1x32768 non-causal",
    "ctx_8x1024_vs_4096": "8x(1024 q vs 4096 kv), non-causal",
    "v3_128h_8192": "H=128, 1x8192 causal",
    "ctx_799_vs_200": "799 q vs 200 kv, non-causal",
}


def find(name: str) -> Optional[Workload]:
    for w in named_workloads():
        if w.name == name:
            return w
    return None


def parse_lens(spec: str) -> List[int]:
    """"8x999,200" -> [999] * 8 + [200] (mlakit-bench's --lens syntax)."""
    out: List[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "x" in part:
            n, length = part.split("x", 1)
            out += [int(length)] * int(n)
        else:
            out.append(int(part))
    if not out or any(n < 0 for n in out):
        raise ValueError(f"bad length list {spec!r}")
    return out


def custom(spec: str) -> Workload:
    """A workload from a spec string, for sweeps beside the named ones:
    "Q[:KV][/c|/n][@H]", Q and KV in --lens syntax (KV defaults to Q), /c causal (default) or
    /n non-causal, @H heads (default 16). E.g. "16x999", "8x1024:8x4096/n", "1x4096@128"."""
    body, heads = (spec.split("@", 1) + ["16"])[:2]
    causal = True
    if body.endswith("/n"):
        body, causal = body[:-2], False
    elif body.endswith("/c"):
        body = body[:-2]
    q_spec, kv_spec = (body.split(":", 1) + [""])[:2]
    q = parse_lens(q_spec)
    kv = parse_lens(kv_spec) if kv_spec else list(q)
    if len(kv) != len(q):
        raise ValueError(f"{spec!r}: {len(q)} q lengths but {len(kv)} kv lengths")
    h = int(heads)
    return Workload(spec, q, kv, causal=causal, heads=h, kv_heads=h)


def parse_dims(spec: str) -> tuple:
    """"128x128" -> (128, 128): (Dqk, Dvo) for --dims."""
    try:
        dqk, dvo = (int(x) for x in spec.lower().split("x"))
    except ValueError:
        raise ValueError(f"bad head dims {spec!r}: want DQKxDVO, e.g. 128x128") from None
    if dqk < 1 or dvo < 1:
        raise ValueError(f"bad head dims {spec!r}: both must be >= 1")
    return dqk, dvo


def with_dims(w: Workload, dqk: int, dvo: int) -> Workload:
    """The same lengths at other head dims, renamed "<name> d<Dqk>x<Dvo>" so that nothing
    (anchors, mlakit-bench's names) mistakes it for the (192, 128) workload."""
    if (dqk, dvo) == (w.dqk, w.dvo):
        return w
    return dataclasses.replace(w, name=f"{w.name} d{dqk}x{dvo}", dqk=dqk, dvo=dvo)


def scaled(w: Workload, divisor: int) -> Workload:
    """Every length divided by `divisor` (at least 1), as mlakit-bench does on the CPU backend."""
    if divisor <= 1:
        return w
    return dataclasses.replace(
        w,
        q_lens=[max(1, n // divisor) for n in w.q_lens],
        kv_lens=[max(1, n // divisor) for n in w.kv_lens],
        scale_divisor=w.scale_divisor * divisor,
    )


if __name__ == "__main__":
    for w in named_workloads():
        print(f"{w.name:22s} B={w.batch:4d} H={w.heads:4d} q={w.total_q:6d} kv={w.total_kv:6d} "
              f"causal={w.causal!s:5s} GFLOP={w.flops() / 1e9:10.3f}")
