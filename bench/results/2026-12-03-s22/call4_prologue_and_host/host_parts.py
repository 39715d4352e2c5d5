"""Where the rest of run()'s host time goes at 1x999 (session 22, after the exchange table):
the native call with fixed tensors (the tensor-map cache hits), rotating tensors (it misses: five
cuTensorMapEncodeTiled), and out allocated in the extension; new_empty alone; the Python wrapper.
Host time per call with the GPU busy (median of 30), three rounds in one process."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
import torch  # noqa: E402
import compare as C  # noqa: E402
import workloads as W  # noqa: E402

SPIN = 40_000_000


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


def main():
    import mlakit
    import mlakit.torch  # noqa: F401
    w = [x for x in W.named_workloads() if x.name == "1x999"][0]
    dev = torch.device("cuda")
    sets = C.make_sets(torch, w, 6, dev, 1234)
    p = mlakit.RaggedPrefill(num_qo_heads=w.heads, num_kv_heads=w.kv_heads, head_dim_qk=w.dqk,
                             head_dim_vo=w.dvo, dtype=torch.bfloat16, max_batch=1, max_q_tokens=w.total_q,
                             max_kv_tokens=w.total_kv, device="cuda")
    p.plan(torch.tensor(w.qo_indptr(), dtype=torch.int32), torch.tensor(w.kv_indptr(), dtype=torch.int32),
           causal=True)
    outs = [torch.empty(w.total_q, w.heads, w.dvo, device=dev, dtype=torch.bfloat16) for _ in range(6)]
    impl = p._impl
    q0, k0, v0 = sets[0]
    fns = {
        "native, fixed tensors (map cache hit)": lambda i: impl.run(q0, k0, v0, outs[0], None, None),
        "native, rotating tensors (miss)": lambda i: impl.run(*sets[i], outs[i], None, None),
        "native, out allocated (q fixed)": lambda i: impl.run(q0, k0, v0, None, None, None),
        "native, out allocated, rotating": lambda i: impl.run(*sets[i], None, None, None),
        "run(q,k,v), rotating": lambda i: p.run(*sets[i]),
        "run(q,k,v,out=), rotating": lambda i: p.run(*sets[i], out=outs[i]),
        "new_empty only": lambda i: q0.new_empty(999, 16, 128),
    }
    print("exchange table in use:", mlakit._C._torch_exchange_in_use())
    for name, fn in fns.items():
        for _ in range(5):
            fn(0)
    torch.cuda.synchronize()
    rows = {n: [] for n in fns}
    for _ in range(3):
        for name, fn in fns.items():
            rows[name].append(host_call(fn))
    for name, v in rows.items():
        print(f"{name:42s} " + " ".join(f"{x:5.1f}" for x in v) + " us")


if __name__ == "__main__":
    main()
