#!/usr/bin/env python3
"""One workload of bench/compare_latent.py through mlakit's LatentAttention, planned once and run a
few times: the process to put under Nsight Compute, which then profiles one launch of the latent
kernel with its inputs and plan exactly as the benchmark builds them. For example, where decode at
128 heads spends its warps' time:

  ncu --kernel-name regex:latent_kernel --launch-skip 1 --launch-count 1 \\
      --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \\
      --metrics 'regex:smsp__warp_issue_stalled_.*_per_warp_active\\.pct' \\
      python3 bench/diagnostics/latent_launch.py decode_h128

--kv-split-size and --slots as compare_latent.py takes them; --smoke for its tiny workloads;
--device cpu runs the CPU backend (the script's own test)."""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import compare_latent as CL  # noqa: E402
import latent_workloads as LW  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", help="a name of bench/latent_workloads.py (e.g. decode_h128, sparse_h64)")
    ap.add_argument("--runs", type=int, default=2, help="run() calls after the plan (default 2)")
    ap.add_argument("--kv-split-size", type=int, default=0)
    ap.add_argument("--slots", action="store_true", help="sparse workloads: indices as global slots")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    import torch

    dev = torch.device(args.device)
    (w,) = LW.select([args.workload], smoke=args.smoke)
    mlakit, why = CL.load_mlakit(dev)
    if mlakit is None:
        sys.exit(why)
    inp = LW.Inputs(torch, w, dev, 0)
    built = CL.build_mlakit(torch, mlakit, w, inp, dev, args.kv_split_size, args.slots)
    out = None
    for _ in range(args.runs):
        out = built.run()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"{w.name}: {w.describe()}; {args.runs} runs; plan {built.info}; out finite: "
          f"{bool(torch.isfinite(out.float()).all())}")


if __name__ == "__main__":
    main()
