"""The MLA step's up-projection GEMM alone (torch.matmul = cuBLAS), at the step's shapes: rows of
latents (leading dim 576, the RoPE tail after the 512 latent columns) times kv_b_proj^T
[4096, 512] into [rows, 4096]. Median of 50 after warm-up, CUDA events; TFLOP/s = 2*m*n*k/t."""
import statistics
import torch

torch.manual_seed(0)
dev = "cuda"
W = torch.randn(4096, 512, device=dev, dtype=torch.bfloat16) * 0.05
for m in (999, 2048, 8192, 8993):
    lat = torch.randn(m, 576, device=dev, dtype=torch.bfloat16)
    A = lat[:, :512]
    out = torch.empty(m, 4096, device=dev, dtype=torch.bfloat16)
    for label, a in (("strided A (ld 576)", A), ("contiguous A", A.contiguous())):
        for _ in range(5):
            torch.matmul(a, W.t(), out=out)
        ts = []
        for _ in range(50):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); torch.matmul(a, W.t(), out=out); e.record(); e.synchronize()
            ts.append(s.elapsed_time(e))
        t = statistics.median(ts)
        print(f"m={m:5d} {label:<20} {t * 1e3:8.1f} us  {2 * m * 4096 * 512 / t / 1e9:6.1f} TFLOP/s")
