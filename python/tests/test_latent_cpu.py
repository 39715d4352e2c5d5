"""mlakit.LatentAttention on the CPU against a float64 PyTorch reference written here: dense
decode, MTP and extends (causal among the new tokens), sparse indices (positions and slots, -1,
topk_length), sinks, q split in two, LSE and max_logits in both layouts, outputs allocated past
the plan's tokens, errors in the caller's names, and the torch custom ops (eager and compiled)."""
import math

import pytest

torch = pytest.importorskip("torch")
import mlakit  # noqa: E402
import mlakit.torch as mt  # noqa: E402
from kv_cache_spec import decode_cache, encode_cache  # noqa: E402

L, R = 512, 64


def make_cache(num_blocks, bs, gen, dtype=torch.bfloat16):
    return torch.randn(num_blocks, bs, L + R, generator=gen).to(dtype)


def make_table(kv_lens, bs, num_blocks, gen):
    """[batch, cols] of distinct shuffled blocks (cols padded with -1), as int32."""
    need = [(k + bs - 1) // bs for k in kv_lens]
    cols = max(need + [1]) + 1
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    rows, it = [], iter(perm)
    for n in need:
        rows.append([next(it) for _ in range(n)] + [-1] * (cols - n))
    return torch.tensor(rows, dtype=torch.int32)


def reference(q, kv_cache, q_lens, kv_lens, table, scale, causal=True, indices=None, topk_length=None,
              kind="positions", sink=None):
    """out [T, H, L], lse [T, H], max [T, H] in float64, the plain way."""
    bs = kv_cache.shape[1]
    flat = kv_cache.reshape(-1, L + R).double()
    T, H = q.shape[0], q.shape[1]
    out = torch.zeros(T, H, L, dtype=torch.float64)
    lse = torch.full((T, H), -math.inf, dtype=torch.float64)
    mx = torch.full((T, H), -math.inf, dtype=torch.float64)
    t = 0
    for r, (nq, kv) in enumerate(zip(q_lens, kv_lens)):
        def slot(p):
            return int(table[r, p // bs]) * bs + p % bs
        for i in range(nq):
            if indices is None:
                vis = min(kv, max(0, kv - nq + i + 1)) if causal else kv
                slots = [slot(p) for p in range(vis)]
            else:
                n = indices.shape[1] if topk_length is None else max(0, min(int(topk_length[t]), indices.shape[1]))
                slots = []
                for x in indices[t, :n].tolist():
                    if kind == "positions" and 0 <= x < kv:
                        slots.append(slot(x))
                    elif kind == "slots" and 0 <= x < flat.shape[0]:
                        slots.append(x)
            if slots:
                k = flat[slots]
                s = q[t].double() @ k.T * scale  # [H, n]
                lse[t] = torch.logsumexp(s, dim=-1)
                mx[t] = s.max(dim=-1).values
                o = torch.softmax(s, dim=-1) @ k[:, :L]
                if sink is not None:
                    o = o / (1 + torch.exp(sink.double() - lse[t])).unsqueeze(-1)
                out[t] = o
            t += 1
    return out, lse, mx


def check(out, lse, mx, ref, tol=1e-2):
    ro, rl, rm = ref
    assert not torch.isnan(out).any()
    err = (out.double() - ro).norm() / ro.norm()
    assert err < tol, err
    empty = torch.isinf(rl)
    assert torch.equal(torch.isinf(lse), empty)
    assert (out[empty] == 0).all()
    assert torch.allclose(lse[~empty].double(), rl[~empty], atol=1e-3, rtol=1e-3)
    if mx is not None:
        assert torch.allclose(mx[~empty].double(), rm[~empty], atol=1e-3, rtol=1e-3)
        assert torch.isinf(mx[empty]).all()


@pytest.mark.parametrize("heads,bs", [(16, 16), (8, 64), (128, 1)])
def test_dense_decode_mtp_extend(heads, bs):
    gen = torch.Generator().manual_seed(heads + bs)
    q_lens, kv_lens = [1, 2, 4, 1, 20], [700, 3, 90, 0, 40]
    if heads == 128:
        q_lens, kv_lens = [1, 2, 1], [600, 9, 1]
    num_blocks = sum((k + bs - 1) // bs for k in kv_lens) + 2
    cache = make_cache(num_blocks, bs, gen)
    table = make_table(kv_lens, bs, num_blocks, gen)
    T = sum(q_lens)
    q = torch.randn(T, heads, L + R, generator=gen).bfloat16()
    scale = 192 ** -0.5
    attn = mlakit.LatentAttention(heads, dtype=torch.bfloat16, block_size=bs, num_blocks=num_blocks, max_batch=8,
                                  max_q_tokens=64, max_kv_tokens=4096)
    attn.plan(q_lens, kv_lens, table, sm_scale=scale)
    out, lse, mx = attn.run(q, cache, return_lse=True, return_max_logits=True)
    check(out, lse, mx, reference(q, cache, q_lens, kv_lens, table, scale))
    # [H, T] layouts hold the same values.
    out2, lse2, mx2 = attn.run(q, cache, return_lse=True, return_max_logits=True, lse_layout="ht")
    assert lse2.shape == (heads, T) and torch.equal(lse2.T, lse) and torch.equal(mx2.T, mx)
    assert torch.equal(out, out2)
    assert attn.info.total_q == T and attn.info.total_kv == sum(kv_lens)


def test_split_q_and_sink():
    gen = torch.Generator().manual_seed(1)
    q_lens, kv_lens, bs, heads = [1, 3], [900, 50], 64, 16
    num_blocks = 20
    cache = make_cache(num_blocks, bs, gen)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = torch.randn(4, heads, L + R, generator=gen).bfloat16()
    sink = torch.randn(heads, generator=gen) * 2
    attn = mlakit.LatentAttention(heads, dtype="bf16", block_size=bs, num_blocks=num_blocks, max_batch=2,
                                  max_q_tokens=4, max_kv_tokens=1000)
    attn.plan(q_lens, kv_lens, table)
    joint, lse = attn.run(q, cache, attn_sink=sink, return_lse=True)
    split = attn.run(q[..., :L].contiguous(), cache, q_pe=q[..., L:].contiguous(), attn_sink=sink)
    assert torch.equal(joint, split)
    check(joint, lse, None, reference(q, cache, q_lens, kv_lens, table, (L + R) ** -0.5, sink=sink))


@pytest.mark.parametrize("kind", ["positions", "slots"])
def test_sparse(kind):
    gen = torch.Generator().manual_seed(7)
    q_lens, kv_lens, bs, heads, topk = [1, 2, 8], [900, 60, 1200], 16, 16, 640
    num_blocks = sum((k + bs - 1) // bs for k in kv_lens) + 3
    cache = make_cache(num_blocks, bs, gen)
    table = make_table(kv_lens, bs, num_blocks, gen)
    T = sum(q_lens)
    q = torch.randn(T, heads, L + R, generator=gen).bfloat16()
    rows = []
    for r, (nq, kv) in enumerate(zip(q_lens, kv_lens)):
        bound = kv if kind == "positions" else num_blocks * bs
        for _ in range(nq):
            row = torch.randint(0, bound, (topk,), generator=gen)
            row[-50:] = -1                       # the indexer's padding
            row[3] = row[0]                      # a repeat
            row[5] = bound                       # past the bound: skipped
            rows.append(row)
    indices = torch.stack(rows).to(torch.int32)
    topk_length = torch.randint(0, topk + 1, (T,), generator=gen).to(torch.int32)
    topk_length[0] = topk
    attn = mlakit.LatentAttention(heads, dtype=torch.bfloat16, block_size=bs, num_blocks=num_blocks, max_batch=4,
                                  max_q_tokens=16, max_kv_tokens=4096, max_topk=1024)
    attn.plan(q_lens, kv_lens if kind == "positions" else None, table if kind == "positions" else None,
              topk=topk, indices=kind)
    assert attn.info.sparse and attn.info.topk == topk
    out, lse = attn.run(q, cache, indices=indices, topk_length=topk_length, return_lse=True)
    check(out, lse, None, reference(q, cache, q_lens, kv_lens, table, (L + R) ** -0.5, indices=indices,
                                    topk_length=topk_length, kind=kind))


@pytest.mark.parametrize("sparse", [False, True])
def test_fp8_ds_mla_cache(sparse):
    gen = torch.Generator().manual_seed(11)
    q_lens, kv_lens, bs, heads, topk = [1, 2, 4], [700, 60, 1100], 64, 16, 256
    num_blocks = sum((k + bs - 1) // bs for k in kv_lens) + 2
    c8 = encode_cache("fp8_ds_mla", make_cache(num_blocks, bs, gen))  # FlashMLA's quantizer
    table = make_table(kv_lens, bs, num_blocks, gen)
    T = sum(q_lens)
    q = torch.randn(T, heads, L + R, generator=gen).bfloat16()
    indices = None
    if sparse:
        indices = torch.stack([torch.randint(-1, kv, (topk,), generator=gen)
                               for nq, kv in zip(q_lens, kv_lens) for _ in range(nq)]).to(torch.int32)
    attn = mlakit.LatentAttention(heads, dtype=torch.bfloat16, block_size=bs, num_blocks=num_blocks, max_batch=4,
                                  max_q_tokens=8, max_kv_tokens=4096, max_topk=topk, kv_cache_dtype="fp8_ds_mla")
    attn.plan(q_lens, kv_lens, table, topk=topk if sparse else 0)
    for cache in (c8, c8.view(torch.float8_e4m3fn)):  # the same bytes either way
        out, lse = attn.run(q, cache, indices=indices, return_lse=True)
        check(out, lse, None, reference(q, decode_cache("fp8_ds_mla", c8), q_lens, kv_lens, table, (L + R) ** -0.5,
                                        indices=indices))
    with pytest.raises(ValueError, match="^mlakit: kv_cache: shape \\[.*, 576\\] must be"):
        attn.run(q, torch.zeros(num_blocks, bs, L + R, dtype=torch.uint8), indices=indices)
    # max_decoded_rows is the CUDA kernel's workspace: the CPU decodes each chunk of rows as it
    # reads them, whatever fp8_decode asks.
    once = mlakit.LatentAttention(heads, dtype=torch.bfloat16, block_size=bs, num_blocks=num_blocks, max_batch=4,
                                  max_q_tokens=8, max_kv_tokens=4096, max_topk=topk, kv_cache_dtype="fp8_ds_mla",
                                  max_decoded_rows=4096)
    assert once.max_decoded_rows == 4096
    once.plan(q_lens, kv_lens, table, topk=topk if sparse else 0, fp8_decode="once")
    assert once.info.decoded_rows == 0
    assert torch.equal(once.run(q, c8, indices=indices), attn.run(q, c8, indices=indices))
    with pytest.raises(ValueError, match="^mlakit: fp8_decode: must be 'auto', 'once' or 'in_kernel'"):
        once.plan(q_lens, kv_lens, table, fp8_decode="always")
    with pytest.raises(ValueError, match="^mlakit: config.max_decoded_rows: must be in \\[0, 2\\^31\\)"):
        mlakit.LatentAttention(heads, num_blocks=4, max_batch=2, max_q_tokens=4, max_decoded_rows=-1)


def test_fp8_cache_with_layer_scale():
    """vLLM's fp8 cache: one e4m3 code a value, the layer's scale given to run(); the custom op too."""
    gen = torch.Generator().manual_seed(12)
    q_lens, kv_lens, bs, heads = [1, 3], [500, 40], 16, 8
    num_blocks = sum((k + bs - 1) // bs for k in kv_lens) + 1
    scale = torch.tensor([0.02], dtype=torch.float32)
    c8 = encode_cache("fp8", make_cache(num_blocks, bs, gen), scale).view(torch.float8_e4m3fn)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = torch.randn(4, heads, L + R, generator=gen).bfloat16()
    attn = mlakit.LatentAttention(heads, dtype=torch.bfloat16, block_size=bs, num_blocks=num_blocks, max_batch=2,
                                  max_q_tokens=4, max_kv_tokens=1024, kv_cache_dtype="fp8")
    attn.plan(q_lens, kv_lens, table)
    out, lse = attn.run(q, c8, k_scale=scale, return_lse=True)
    decoded = (c8.float() * scale).to(torch.bfloat16)  # what is attended: code x scale, rounded once to bf16
    check(out, lse, None, reference(q, decoded, q_lens, kv_lens, table, (L + R) ** -0.5))
    assert torch.equal(torch.ops.mlakit.latent_attention(q, c8.view(torch.uint8), attn.handle, k_scale=scale), out)
    with pytest.raises(ValueError, match="^mlakit: k_scale: kv_cache_dtype fp8 needs the layer's cache scale"):
        attn.run(q, c8)


def test_outputs_allocated_past_the_plan():
    gen = torch.Generator().manual_seed(3)
    cache = make_cache(4, 16, gen)
    table = make_table([20], 16, 4, gen)
    attn = mlakit.LatentAttention(8, dtype=torch.bfloat16, block_size=16, num_blocks=4, max_batch=1,
                                  max_q_tokens=8, max_kv_tokens=64)
    attn.plan([2], [20], table)
    q = torch.randn(6, 8, L + R, generator=gen).bfloat16()  # a bucket of 6 rows for a plan of 2
    for layout in ("th", "ht"):
        out, lse = attn.run(q, cache, return_lse=True, lse_layout=layout)
        lse = lse if layout == "th" else lse.T
        assert (out[2:] == 0).all() and torch.isinf(lse[2:]).all()
        assert torch.isfinite(lse[:2]).all()


def test_numpy_arrays():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    bs, heads = 16, 4
    cache = rng.standard_normal((3, bs, L + R)).astype(np.float16)
    q = rng.standard_normal((1, heads, L + R)).astype(np.float16)
    attn = mlakit.LatentAttention(heads, dtype="fp16", block_size=bs, num_blocks=3, max_batch=1, max_q_tokens=1,
                                  max_kv_tokens=48)
    attn.plan(np.array([1]), np.array([40]), np.array([[2, 0, 1]]))
    out = attn.run(q, cache)
    ref = reference(torch.from_numpy(q), torch.from_numpy(cache), [1], [40], torch.tensor([[2, 0, 1]]),
                    (L + R) ** -0.5)[0]
    assert float((torch.from_numpy(out).double() - ref).norm() / ref.norm()) < 2e-3


def test_errors_name_the_arguments():
    attn = mlakit.LatentAttention(16, dtype=torch.bfloat16, block_size=16, num_blocks=4, max_batch=2,
                                  max_q_tokens=4, max_kv_tokens=64)
    with pytest.raises(ValueError, match="^mlakit: kv_lens: has 1 entries but query_lens has 2"):
        attn.plan([1, 1], [3], [[0], [1]])
    with pytest.raises(ValueError, match="^mlakit: batch_size: 3 exceeds config.max_batch = 2"):
        attn.plan([1, 1, 1], [1, 1, 1], [[0], [1], [2]])
    with pytest.raises(ValueError, match="^mlakit: block_table: block_table\\[1\\]\\[0\\] = 9 is outside"):
        attn.plan([1, 1], [3, 3], [[0], [9]])
    with pytest.raises(ValueError, match="^mlakit: options.topk: 8 exceeds config.max_topk = 0"):
        attn.plan([1], [3], [[0]], topk=8)
    with pytest.raises(ValueError, match="^mlakit: indices: must be 'positions' or 'slots'"):
        attn.plan([1], [3], [[0]], indices="global")
    attn.plan([1, 1], [3, 20], [[0, -1], [1, 2]])
    cache = torch.zeros(4, 16, L + R, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="^mlakit: q: shape \\[2, 8, 576\\] must be"):
        attn.run(torch.zeros(2, 8, L + R, dtype=torch.bfloat16), cache)
    with pytest.raises(TypeError, match="^mlakit: q: dtype fp16 must be bf16"):
        attn.run(torch.zeros(2, 16, L + R, dtype=torch.float16), cache)
    with pytest.raises(ValueError, match="^mlakit: indices: the plan is dense"):
        attn.run(torch.zeros(2, 16, L + R, dtype=torch.bfloat16), cache,
                 indices=torch.zeros(2, 4, dtype=torch.int32))
    # CUDA: without a GPU the device is refused; with one, widths other than (512, 64).
    no_gpu = mlakit.cuda_device_count() == 0
    with pytest.raises(ValueError, match="^mlakit: config.device: " if no_gpu else "^mlakit: config.kv_lora_rank: "):
        mlakit.LatentAttention(16, kv_lora_rank=256, device="cuda", num_blocks=4, max_batch=2, max_q_tokens=4)
    with pytest.raises(ValueError, match="^mlakit: config.kv_cache_dtype: fp8 caches are read with dtype bf16"):
        mlakit.LatentAttention(16, dtype="fp16", num_blocks=4, max_batch=2, max_q_tokens=4, kv_cache_dtype="fp8")
    with pytest.raises(ValueError, match="^mlakit: config.kv_cache_dtype: fp8_ds_mla rows need kv_lora_rank 512"):
        mlakit.LatentAttention(16, dtype="fp16", num_blocks=4, max_batch=2, max_q_tokens=4, kv_cache_dtype="fp8_ds_mla")
    with pytest.raises(ValueError, match="^mlakit: config.block_size: must be a power of two"):
        mlakit.LatentAttention(16, block_size=48, num_blocks=4, max_batch=2, max_q_tokens=4)


def test_torch_ops_eager_and_compiled():
    gen = torch.Generator().manual_seed(5)
    q_lens, kv_lens, bs, heads = [1, 2], [300, 40], 16, 16
    num_blocks = 24
    cache = make_cache(num_blocks, bs, gen)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = torch.randn(3, heads, L + R, generator=gen).bfloat16()
    attn = mlakit.LatentAttention(heads, dtype=torch.bfloat16, block_size=bs, num_blocks=num_blocks, max_batch=2,
                                  max_q_tokens=4, max_kv_tokens=512)
    attn.plan(q_lens, kv_lens, table)
    want, want_lse = attn.run(q, cache, return_lse=True)
    assert torch.equal(torch.ops.mlakit.latent_attention(q, cache, attn.handle), want)
    out, lse = torch.ops.mlakit.latent_attention_with_lse(q, cache, attn.handle, lse_head_major=True)
    assert torch.equal(out, want) and torch.equal(lse.T, want_lse)
    got = mt.latent_attention(attn, q, cache)
    assert torch.equal(got, want)
    fn = torch.compile(lambda q, c: mt.latent_attention(attn, q, c, return_lse=True), fullgraph=True)
    out, lse = fn(q, cache)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    buf, lbuf, mbuf = torch.empty_like(want), torch.empty_like(want_lse), torch.empty_like(want_lse)
    fn_out = torch.compile(lambda: mt.latent_attention_out(attn, q, cache, buf, lbuf, max_logits=mbuf),
                           fullgraph=True)
    fn_out()
    assert torch.equal(buf, want) and torch.equal(lbuf, want_lse)
    # A re-plan with new lengths: the compiled call reads the new plan.
    attn.plan([2, 1], [41, 7], make_table([41, 7], bs, num_blocks, gen))
    fn_out()
    want2 = attn.run(q, cache)
    assert torch.equal(buf, want2)


def test_block_table_as_int64_tensor_and_replan():
    gen = torch.Generator().manual_seed(9)
    bs, heads = 64, 16
    cache = make_cache(8, bs, gen)
    attn = mlakit.LatentAttention(heads, dtype=torch.bfloat16, block_size=bs, num_blocks=8, max_batch=3,
                                  max_q_tokens=6, max_kv_tokens=512)
    for q_lens, kv_lens in [([1, 1, 1], [64, 1, 130]), ([2, 4], [200, 4])]:
        table = make_table(kv_lens, bs, 8, gen).to(torch.int64)
        q = torch.randn(sum(q_lens), heads, L + R, generator=gen).bfloat16()
        attn.plan(torch.tensor(q_lens), torch.tensor(kv_lens), table)
        out, lse = attn.run(q, cache, return_lse=True)
        check(out, lse, None, reference(q, cache, q_lens, kv_lens, table, (L + R) ** -0.5))
