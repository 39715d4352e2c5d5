"""Where compare.py's 1x999 interval goes (session 22). compare.py times each call between two
CUDA events, calls back to back: when one loop iteration's host time (two event records and the
call) exceeds the kernel's, the GPU waits for the host and the interval is the iteration's host
period, not the kernel. This prints, per entry point: compare.py's interval (its time_cuda), the
interval with the host kept ahead (a spin kernel queued first), the host time of the call alone
and of a whole compare.py iteration, both with the GPU busy."""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
import torch  # noqa: E402
import compare as C  # noqa: E402
import workloads as W  # noqa: E402

SPIN = 40_000_000  # ~20 ms: room for the timed calls to queue behind it


def host_ahead_interval(fn, n=30):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda.synchronize()
    torch.cuda._sleep(SPIN)
    for i in range(n):
        starts[i].record()
        fn(i % 6)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3


def host_call(fn, n=30):
    torch.cuda.synchronize()
    torch.cuda._sleep(SPIN)
    v = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i % 6)
        v.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(v)


def host_iteration(fn, n=30):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda.synchronize()
    torch.cuda._sleep(SPIN)
    v = []
    for i in range(n):
        t0 = time.perf_counter()
        starts[i].record()
        fn(i % 6)
        ends[i].record()
        v.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(v)


def main():
    import mlakit
    w = [x for x in W.named_workloads() if x.name == "1x999"][0]
    dev = torch.device("cuda")
    sets = C.make_sets(torch, w, 6, dev, 1234)
    fns = {}
    ml_run = C.build_mlakit(torch, mlakit, w, sets, dev)[0]
    fns["mlakit run(q,k,v) [compare]"] = ml_run
    p = mlakit.RaggedPrefill(num_qo_heads=w.heads, num_kv_heads=w.kv_heads, head_dim_qk=w.dqk,
                             head_dim_vo=w.dvo, dtype=torch.bfloat16, max_batch=1, max_q_tokens=w.total_q,
                             max_kv_tokens=w.total_kv, device="cuda")
    p.plan(torch.tensor(w.qo_indptr(), dtype=torch.int32), torch.tensor(w.kv_indptr(), dtype=torch.int32),
           causal=True)
    outs = [torch.empty(w.total_q, w.heads, w.dvo, device=dev, dtype=torch.bfloat16) for _ in range(6)]
    fns["mlakit run(out=)"] = lambda i: p.run(*sets[i], out=outs[i])
    impl = p._impl
    fns["mlakit native _impl.run"] = lambda i: impl.run(sets[i][0], sets[i][1], sets[i][2], outs[i], None, None)
    q0 = sets[0][0]
    fns["new_empty only"] = lambda i: q0.new_empty(999, 16, 128)
    fns["nothing"] = lambda i: None
    try:
        import flashinfer
        C.FI_STATE["mod"] = flashinfer
        fns["flashinfer fa3 run"] = C.build_flashinfer(torch, flashinfer, w, sets, dev, "fa3", False)[0]
    except Exception as ex:  # noqa: BLE001
        print("flashinfer:", ex)
    # mlakit through a CUDA graph of run(out=) on set 0 (replay host cost only).
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        p.run(*sets[0], out=outs[0])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p.run(*sets[0], out=outs[0])
    fns["mlakit graph replay"] = lambda i: g.replay()
    rows = {}
    for name, fn in fns.items():
        for _ in range(5):
            fn(0)
        torch.cuda.synchronize()
        r = {"compare_ms": [C.time_cuda(torch, fn, 6, 10, 30)[0] for _ in range(3)],
             "host_ahead_us": host_ahead_interval(fn), "host_call_us": host_call(fn),
             "host_iteration_us": host_iteration(fn)}
        rows[name] = r
        print(f"{name:34s} compare {' '.join('%.4f' % x for x in r['compare_ms'])} ms | host-ahead "
              f"{r['host_ahead_us']:6.1f} us | call {r['host_call_us']:5.1f} us | iteration "
              f"{r['host_iteration_us']:5.1f} us", flush=True)
    out = os.environ.get("OUT", ".")
    tag = os.environ.get("TAG", "run")
    with open(os.path.join(out, f"loop_cost_{tag}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
