#!/usr/bin/env python3
"""Markdown table of a bench/compare.py JSON result: mlakit beside each peer, with ratios.

    python3 bench/summarize.py bench/results/<run>/compare.json

ratio = peer ms / mlakit ms (> 1: mlakit is faster). TFLOP/s count visible pairs only.
"""
import json
import sys

PEERS = ["fa2_varlen_padV", "sdpa_cudnn", "sdpa_efficient", "flex_attention"]


def cell(r, ml_ms):
    if not r or "ms" not in r:
        return "n/a"
    ratio = r["ms"] / ml_ms if ml_ms else float("nan")
    return f"{r['ms']:.3f} ({r['tflops']:.0f} TF/s, ×{ratio:.2f})"


def main(path):
    d = json.load(open(path))
    peak = (d.get("ceilings") or {}).get("gemm_bf16_8192_tflops")
    print(f"commit {d.get('git_commit')}, {d.get('time_utc')}, matmul ceiling this run: "
          f"{peak:.0f} TFLOP/s" if peak else f"commit {d.get('git_commit')}")
    print()
    print("| workload | mlakit ms | TFLOP/s | % of 774 | " + " | ".join(PEERS) + " |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in PEERS) + " |")
    for c in d["cases"]:
        ml = c["results"].get("mlakit", {})
        ml_ms = ml.get("ms")
        head = (f"| `{c['workload']}` | {ml_ms:.3f} | {ml['tflops']:.0f} | {ml['pct_peak']:.1f}% |"
                if ml_ms else f"| `{c['workload']}` | n/a | | |")
        print(head + " " + " | ".join(cell(c["results"].get(p), ml_ms) for p in PEERS) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
