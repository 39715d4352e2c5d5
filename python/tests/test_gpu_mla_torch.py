"""MlaStep with PyTorch CUDA tensors (skipped without a CUDA device): the whole step against a
PyTorch float32 re-creation (K and V materialized per request), the mlakit.torch custom op, and
CUDA-graph capture of a layer replayed after re-planning with other lengths and block tables."""

import math

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402

if not torch.cuda.is_available() or mlakit.cuda_device_count() == 0:
    pytest.skip("needs a CUDA device and an mlakit build with CUDA: " +
                (mlakit.cuda_unavailable_reason() or "torch.cuda.is_available() is False"),
                allow_module_level=True)

import mlakit.torch as mt  # noqa: E402

DEV = torch.device("cuda")
H, L, DN, R, DV, BS = 16, 512, 128, 64, 128, 16


def block_table(gen, q_lens, ctx_lens, num_blocks):
    need = [-(-(c + q) // BS) for q, c in zip(q_lens, ctx_lens)]
    ids = torch.randperm(num_blocks, generator=gen)
    bt = torch.zeros(len(q_lens), max(need) + 1, dtype=torch.int32)
    k = 0
    for b, n in enumerate(need):
        bt[b, :n] = ids[k:k + n]
        k += n
    return bt


def layer(gen, rows, num_blocks):
    g = dict(generator=gen, device="cpu")
    return dict(q=torch.randn(rows, H, DN + R, **g).to(DEV, torch.bfloat16),
                kv_c=torch.randn(rows, L, **g).to(DEV, torch.bfloat16),
                k_pe=torch.randn(rows, R, **g).to(DEV, torch.bfloat16),
                w=(torch.randn(H * (DN + DV), L, **g) / math.sqrt(L)).to(DEV, torch.bfloat16),
                cache=torch.randn(num_blocks, BS, L + R, **g).to(DEV, torch.bfloat16))


def reference(x, q_lens, ctx_lens, bt):
    """float32: per request, latents of every position -> K [n, H, 192], V [n, H, 128]; causal
    softmax with the context ahead of the new tokens. Reads the cache before the step's write."""
    outs, q0 = [], 0
    w = x["w"].float()
    cache = x["cache"].float()
    for b, (n, ctx) in enumerate(zip(q_lens, ctx_lens)):
        pos = torch.arange(ctx)
        lat_ctx = cache[bt[b, pos // BS].long().to(DEV), (pos % BS).to(DEV)]
        lat_new = torch.cat([x["kv_c"][q0:q0 + n], x["k_pe"][q0:q0 + n]], dim=-1).float()
        lat = torch.cat([lat_ctx, lat_new])
        kv = (lat[:, :L] @ w.T).view(-1, H, DN + DV)
        k = torch.cat([kv[..., :DN], lat[:, None, L:].expand(-1, H, R)], dim=-1)
        v = kv[..., DN:]
        s = torch.einsum("qhd,khd->hqk", x["q"][q0:q0 + n].float(), k) / math.sqrt(DN + R)
        mask = torch.arange(ctx + n, device=DEV)[None, :] <= (ctx + torch.arange(n, device=DEV))[:, None]
        p = torch.softmax(s.masked_fill(~mask, -math.inf), dim=-1)
        outs.append(torch.einsum("hqk,khd->qhd", p, v))
        q0 += n
    return torch.cat(outs)


def rel(a, b):
    return ((a.float() - b).norm() / b.norm()).item()


@pytest.mark.parametrize("workspace_rows", [0, 400], ids=["one_launch", "chunks"])
def test_step_vs_torch_reference(workspace_rows):
    gen = torch.Generator().manual_seed(5)
    q_lens, ctx_lens = [300, 1, 77], [0, 17, 600]
    num_blocks = 128
    bt = block_table(gen, q_lens, ctx_lens, num_blocks)
    x = layer(gen, sum(q_lens), num_blocks)
    ref = reference(x, q_lens, ctx_lens, bt)
    step = mlakit.MlaStep(H, dtype=torch.bfloat16, device=DEV, block_size=BS, num_blocks=num_blocks,
                          max_batch=4, max_tokens=400, max_context_tokens=1024, workspace_rows=workspace_rows,
                          absorb_max_query_len=0)
    step.plan(q_lens, ctx_lens, bt)
    assert step.info.chunked == (workspace_rows > 0)
    out = torch.full((sum(q_lens), H, DV), float("nan"), device=DEV, dtype=torch.bfloat16)
    mt.mla_step_out(step, x["q"], x["kv_c"], x["k_pe"], x["w"], x["cache"], out)
    torch.cuda.synchronize()
    assert not out.isnan().any()
    assert rel(out, ref) < 1e-2


BUCKET, GRAPH_ROWS, GRAPH_BLOCKS = 512, 1024, 160


def graph_setup(seed, upload_in_run, first_set):
    """A step planned for the graph tests' bucket (512 new tokens, 1024 rows), the layer buffers a
    graph keeps reading, its output, and one eager run under `first_set`'s plan (one-time setup)."""
    gen = torch.Generator().manual_seed(seed)
    step = mlakit.MlaStep(H, dtype=torch.bfloat16, device=DEV, block_size=BS, num_blocks=GRAPH_BLOCKS,
                          max_batch=8, max_tokens=BUCKET, max_context_tokens=GRAPH_ROWS,
                          workspace_rows=GRAPH_ROWS, upload_in_run=upload_in_run)
    x = layer(gen, BUCKET, GRAPH_BLOCKS)
    out = torch.empty(BUCKET, H, DV, device=DEV, dtype=torch.bfloat16)
    step.plan(first_set[0], first_set[1], block_table(gen, *first_set, GRAPH_BLOCKS), graph_rows=GRAPH_ROWS)
    step.run(x["q"], x["kv_c"], x["k_pe"], x["w"], x["cache"], out)  # warm-up
    torch.cuda.synchronize()
    return gen, step, x, out


def check_replays(gen, x, out, sets, plan_and_replay):
    """Per set of lengths: new inputs in the captured buffers, then plan_and_replay(q_lens,
    ctx_lens, block_table); the output must be fully written and match the reference."""
    for q_lens, ctx_lens in sets:
        new = layer(gen, BUCKET, GRAPH_BLOCKS)
        for k in x:
            x[k].copy_(new[k])
        bt = block_table(gen, q_lens, ctx_lens, GRAPH_BLOCKS)
        ref = reference(x, q_lens, ctx_lens, bt)
        out.fill_(float("nan"))
        plan_and_replay(q_lens, ctx_lens, bt)
        torch.cuda.synchronize()
        got = out[:sum(q_lens)]
        assert not got.isnan().any()
        assert rel(got, ref) < 1e-2


@pytest.mark.parametrize("upload_in_run", [False, True], ids=["upload_in_plan", "upload_in_run"])
def test_graph_replay_after_replan(upload_in_run):
    """upload_in_run: the captured graph uploads the plan itself (its first node), so each replay
    runs under the plan made just before it with no copy issued by plan()."""
    sets = [([300, 1, 100], [0, 17, 100]), ([512], [500]), ([7, 200, 0, 129, 64], [1, 0, 33, 64, 200])]
    gen, step, x, out = graph_setup(9, upload_in_run, sets[0])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step.run(x["q"], x["kv_c"], x["k_pe"], x["w"], x["cache"], out)

    def plan_and_replay(q_lens, ctx_lens, bt):
        step.plan(q_lens, ctx_lens, bt, graph_rows=GRAPH_ROWS)
        g.replay()
    check_replays(gen, x, out, sets, plan_and_replay)


def test_outputs_it_allocates_hold_key_less_rows_past_the_step():
    """run() without out= at the bucket's row count: rows past the step's new tokens are out 0 and
    lse -inf, eager (on PyTorch's current stream or an explicit one), and in a torch.cuda.graph
    capture replayed after re-planning with fewer new tokens (the whole output is cleared in the
    graph, so the rows the captured plan wrote do not survive a smaller one)."""
    sets = [([300, 1, 100], [0, 17, 100]), ([7, 200, 0, 12], [1, 0, 33, 64]), ([512], [500])]
    gen, step, x, _ = graph_setup(13, False, sets[0])
    args = (x["q"], x["kv_c"], x["k_pe"], x["w"], x["cache"])

    def key_less_past(out, lse, tq):
        torch.cuda.synchronize()
        assert out.shape[0] == BUCKET and lse.shape == (BUCKET, H)
        assert torch.all(out[tq:] == 0) and torch.all(torch.isneginf(lse[tq:]))
        assert not out[:tq].isnan().any() and torch.isfinite(lse[:tq]).all()

    key_less_past(*step.run(*args, return_lse=True), 401)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    key_less_past(*step.run(*args, return_lse=True, stream=side), 401)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = step.run(*args, return_lse=True)
    for q_lens, ctx_lens in sets[1:] + sets[:1]:
        step.plan(q_lens, ctx_lens, block_table(gen, q_lens, ctx_lens, GRAPH_BLOCKS), graph_rows=GRAPH_ROWS)
        g.replay()
        key_less_past(out, lse, sum(q_lens))


@pytest.mark.parametrize("upload_in_run", [False, True], ids=["upload_in_plan", "upload_in_run"])
def test_stream_graph_plan_and_replay_in_one_call(upload_in_run):
    """mlakit.StreamGraph: the layer captured natively, then plan(..., replay=graph) plans and
    launches it in one call after every re-plan."""
    sets = [([300, 1, 100], [0, 17, 100]), ([7, 200, 0, 129, 64], [1, 0, 33, 64, 200])]
    graph = mlakit.StreamGraph(DEV)
    assert not graph.captured
    gen, step, x, out = graph_setup(11, upload_in_run, sets[0])
    with graph.capture():
        step.run(x["q"], x["kv_c"], x["k_pe"], x["w"], x["cache"], out)
    assert graph.captured
    check_replays(gen, x, out, sets, lambda q_lens, ctx_lens, bt: step.plan(
        q_lens, ctx_lens, bt, graph_rows=GRAPH_ROWS, replay=graph))
    # A failing body discards its capture; the earlier graph stays.
    with pytest.raises(RuntimeError, match="inside"):
        with graph.capture():
            raise RuntimeError("inside")
    assert graph.captured


@pytest.mark.parametrize("workspace_rows", [0, 400], ids=["one_launch", "chunks"])
def test_absorbed_requests_vs_torch_reference(workspace_rows):
    # Decode, MTP and a 4-token extend attended in latent space (absorb_max_query_len 4) beside a
    # prefill chunk and a new request; needs the Hopper latent kernel.
    try:
        mlakit.LatentAttention(H, dtype=torch.bfloat16, device="cuda", num_blocks=1, max_batch=1, max_q_tokens=1,
                               max_kv_tokens=64)
    except ValueError as e:
        pytest.skip(f"LatentAttention on CUDA: {e}")
    gen = torch.Generator().manual_seed(9)
    q_lens, ctx_lens = [1, 300, 2, 4, 1], [700, 300, 90, 33, 0]
    num_blocks = 128
    bt = block_table(gen, q_lens, ctx_lens, num_blocks)
    x = layer(gen, sum(q_lens), num_blocks)
    ref = reference(x, q_lens, ctx_lens, bt)
    step = mlakit.MlaStep(H, dtype=torch.bfloat16, device=DEV, block_size=BS, num_blocks=num_blocks,
                          max_batch=8, max_tokens=400, max_context_tokens=2048, workspace_rows=workspace_rows,
                          absorb_max_query_len=4)
    step.plan(q_lens, ctx_lens, bt)
    assert (step.info.absorbed_requests, step.info.absorbed_tokens) == (3, 7)
    assert step.info.chunked == (workspace_rows > 0)
    out = torch.full((sum(q_lens), H, DV), float("nan"), device=DEV, dtype=torch.bfloat16)
    mt.mla_step_out(step, x["q"], x["kv_c"], x["k_pe"], x["w"], x["cache"], out)
    torch.cuda.synchronize()
    assert not out.isnan().any()
    assert rel(out, ref) < 1e-2


def test_sparse_step_vs_torch_reference():
    # DeepSeek-V3.2 with topk 64: tokens at positions >= 64 attend to the 64 positions their row of
    # the indices names (in latent space); the others densely. float32 re-creation of both.
    try:
        mlakit.LatentAttention(H, dtype=torch.bfloat16, device="cuda", num_blocks=1, max_batch=1, max_q_tokens=1,
                               max_kv_tokens=64)
    except ValueError as e:
        pytest.skip(f"LatentAttention on CUDA: {e}")
    gen = torch.Generator().manual_seed(13)
    q_lens, ctx_lens, K = [100, 2, 5], [0, 300, 40], 64
    num_blocks = 64
    bt = block_table(gen, q_lens, ctx_lens, num_blocks)
    x = layer(gen, sum(q_lens), num_blocks)
    ref = reference(x, q_lens, ctx_lens, bt)  # dense; the sparse rows are redone below
    idx = torch.full((sum(q_lens), K), -1, dtype=torch.int32)
    w = x["w"].float()
    cache = x["cache"].float()
    t = 0
    for b, (n, ctx) in enumerate(zip(q_lens, ctx_lens)):
        for j in range(n):
            p = ctx + j
            if p >= K:
                row = torch.randint(0, p + 1, (K,), generator=gen)
                idx[t] = row.to(torch.int32)
                new = row >= ctx
                lat = torch.empty(K, L + R, device=DEV)
                old = row[~new]
                lat[~new.to(DEV)] = cache[bt[b, old // BS].long().to(DEV), (old % BS).to(DEV)]
                tok = (t - j + row[new] - ctx).to(DEV)
                lat[new.to(DEV)] = torch.cat([x["kv_c"][tok], x["k_pe"][tok]], dim=-1).float()
                kv = (lat[:, :L] @ w.T).view(K, H, DN + DV)
                k = torch.cat([kv[..., :DN], lat[:, None, L:].expand(-1, H, R)], dim=-1)
                sc = torch.einsum("hd,khd->hk", x["q"][t].float(), k) / math.sqrt(DN + R)
                ref[t] = torch.einsum("hk,khd->hd", torch.softmax(sc, dim=-1), kv[..., DN:])
            t += 1
    step = mlakit.MlaStep(H, dtype=torch.bfloat16, device=DEV, block_size=BS, num_blocks=num_blocks,
                          max_batch=4, max_tokens=128, max_context_tokens=512, max_topk=K)
    step.plan(q_lens, ctx_lens, bt, topk=K)
    assert step.info.sparse_tokens == 36 + 2 + 0
    out = torch.full((sum(q_lens), H, DV), float("nan"), device=DEV, dtype=torch.bfloat16)
    mt.mla_step_out(step, x["q"], x["kv_c"], x["k_pe"], x["w"], x["cache"], out, indices=idx.to(DEV))
    torch.cuda.synchronize()
    assert not out.isnan().any()
    assert rel(out, ref) < 1e-2
