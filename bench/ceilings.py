"""The run's own ceilings: the bf16 matrix-product rate (8192^3 torch.matmul, mean of 10 after 3
warm-ups), on request the FP8 one (8192^3 torch._scaled_mm, e4m3 x e4m3 -> bf16 with unit scales
and fast accumulation: cuBLASLt's FP8 GEMM, measured the same way), and a device-to-device copy's
bandwidth. bench/compare.py states every kernel's TFLOP/s
as a fraction of the first; bench/compare_mla.py states the MLA step's useful work the same way.
Measured in the same process as what it scales, since the H200's rate moves between hosts and
power states (774-809 TFLOP/s across runs on the H200)."""


def _time_mm(torch, fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 10


def ceilings(torch, dev, fp8=False):
    out = {}
    try:
        n = 8192
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        for _ in range(3):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10):
            torch.matmul(a, b)
        e.record()
        torch.cuda.synchronize()
        ms = s.elapsed_time(e) / 10
        out["gemm_bf16_8192_tflops"] = 2 * n ** 3 / (ms * 1e-3) / 1e12
        del a, b
    except Exception as ex:  # noqa: BLE001
        out["gemm_error"] = repr(ex)
    if fp8:
        try:
            n = 8192
            a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
            b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major: cuBLASLt's TN
            one = torch.tensor(1.0, device=dev)
            # use_fast_accum: the tensor cores' own accumulation, as the attention kernels' FP8 wgmmas
            # accumulate (no periodic promotion to fp32): the rate the hardware gives FP8 products.
            ms = _time_mm(torch, lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                          use_fast_accum=True))
            out["gemm_e4m3_8192_tflops"] = 2 * n ** 3 / (ms * 1e-3) / 1e12
            del a, b
        except Exception as ex:  # noqa: BLE001
            out["gemm_e4m3_error"] = repr(ex)
    try:
        nbytes = 1 << 31
        x = torch.empty(nbytes // 2, device=dev, dtype=torch.bfloat16).normal_()
        y = torch.empty_like(x)
        for _ in range(3):
            y.copy_(x)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10):
            y.copy_(x)
        e.record()
        torch.cuda.synchronize()
        ms = s.elapsed_time(e) / 10
        out["d2d_copy_GBps_rw"] = 2 * nbytes / (ms * 1e-3) / 1e9
        del x, y
    except Exception as ex:  # noqa: BLE001
        out["copy_error"] = repr(ex)
    torch.cuda.empty_cache()
    return out
