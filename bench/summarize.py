#!/usr/bin/env python3
"""Markdown tables of a bench/compare.py JSON result, as the README shows them: mlakit beside each
peer with ratios, plan() host cost, and the per-call cost table.

    python3 bench/summarize.py bench/results/<run>/compare.json

ratio = peer ms / mlakit ms (> 1: mlakit is faster). TFLOP/s count visible pairs only. "% of
ceiling" is of the bf16 matrix-product ceiling measured in the same run (8192^3 torch.matmul);
when the run did not measure it, of the fixed --peak-tflops (774) and the header says so.
"""
import json
import sys

PEERS = ["flashinfer_fa3", "flashinfer_fa2", "fa2_varlen_padV", "sdpa_cudnn", "sdpa_efficient",
         "flex_attention"]
PLANNED = ["mlakit", "flashinfer_fa3", "flashinfer_fa2"]


def cell(r, ml_ms):
    if not r or "ms" not in r:
        return "n/a"
    ratio = f", ×{r['ms'] / ml_ms:.2f}" if ml_ms else ""
    return f"{r['ms']:.3f} ({r['tflops']:.0f} TF/s{ratio})"


def pct_of(r, ceiling):
    """Percent of this run's measured ceiling (computed here, so older JSON without
    pct_ceiling reads the same), else the stored pct_peak; None if no result."""
    if not r or "tflops" not in r:
        return None
    return 100.0 * r["tflops"] / ceiling if ceiling else r.get("pct_peak")


def num(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "n/a"


def main(path):
    d = json.load(open(path))
    ceiling = (d.get("ceilings") or {}).get("gemm_bf16_8192_tflops")
    peak = d.get("peak_tflops", 774.0)
    head = f"commit {d.get('git_commit')}, {d.get('time_utc')}"
    if d.get("source_digest"):
        head += f", source digest {d['source_digest']} (bench/run_record.py)"
    if ceiling:
        head += f", matmul ceiling this run: {ceiling:.0f} TFLOP/s"
    if d.get("smoke"):
        head += " (SMOKE run: scaled workloads, numbers meaningless)"
    print(head)
    print()
    pct_head = f"% of {ceiling:.0f}" if ceiling else f"% of {peak:.0f} (fixed)"
    peers = [p for p in PEERS if any(p in c.get("results", {}) for c in d["cases"])]
    print(f"| workload | mlakit ms | TFLOP/s | {pct_head} | " + " | ".join(peers) + " |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in peers) + " |")
    for c in d["cases"]:
        ml = c["results"].get("mlakit", {})
        ml_ms = ml.get("ms")
        if ml_ms:
            pct = pct_of(ml, ceiling)
            row = f"| `{c['workload']}` | {ml_ms:.3f} | {ml['tflops']:.0f} | {num(pct, '.1f')}% |"
        else:
            row = f"| `{c['workload']}` | n/a | | |"
        print(row + " " + " | ".join(cell(c["results"].get(p), ml_ms) for p in peers) + " |")

    # Percent of the ceiling for every method.
    methods = ["mlakit"] + peers
    print()
    print(f"TFLOP/s as {pct_head}:")
    print()
    print("| workload | " + " | ".join(methods) + " |")
    print("| --- | " + " | ".join("---:" for _ in methods) + " |")
    for c in d["cases"]:
        vals = []
        for m in methods:
            pct = pct_of(c["results"].get(m), ceiling)
            vals.append(f"{pct:.1f}%" if isinstance(pct, (int, float)) else "n/a")
        print(f"| `{c['workload']}` | " + " | ".join(vals) + " |")

    # plan() host cost.
    if any(k.startswith("plan_us_") for c in d["cases"] for r in c["results"].values() for k in r):
        print()
        print("plan() host cost from Python, µs (median; device idle before each call):")
        print()
        cols = [(m, kind) for m in PLANNED for kind in ("host", "device")
                if any(f"plan_us_{kind}_indptr" in (c["results"].get(m) or {}) for c in d["cases"])]
        print("| workload | " + " | ".join(f"{m} ({kind} indptr)" for m, kind in cols) + " |")
        print("| --- | " + " | ".join("---:" for _ in cols) + " |")
        for c in d["cases"]:
            vals = [num((c["results"].get(m) or {}).get(f"plan_us_{kind}_indptr"), ".1f") for m, kind in cols]
            print(f"| `{c['workload']}` | " + " | ".join(vals) + " |")

    # Per-call cost.
    rows = d.get("overhead")
    if rows:
        print()
        print("Per-call cost from Python at 1x999, µs (overhead = synchronized wall - device time):")
        print()
        print("| entry point | device | host (call returns) | synchronized wall | overhead |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for r in rows:
            if "skipped" in r:
                why = r["skipped"].replace("|", "\\|")  # a '|' would split the markdown cell
                print(f"| {r['entry']} | skipped: {why} | | | |")
            else:
                print(f"| {r['entry']} | {r['device_us']:.1f} | {r['host_us']:.1f} | "
                      f"{r['sync_wall_us']:.1f} | {r['overhead_us']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
