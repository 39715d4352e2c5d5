"""mlakit.LatentAttention with PyTorch CUDA tensors (the Hopper kernel; skipped without a CUDA
device, on GPUs other than sm90, or in builds without the kernel): decode, MTP causal and not,
sparse indices with -1 padding (positions and slots, topk_length), q split in two, sinks, LSE and
max_logits in both layouts, against a float64 PyTorch reference written here; bitwise repeatable
runs and batch invariance; the fp8_ds_mla and fp8 caches (their rows decoded once too); the
torch custom ops; torch.cuda.CUDAGraph capture replayed after re-planning (the plan uploaded by
plan() and by run()); and the widths the kernel refuses."""
import math

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402

if not torch.cuda.is_available() or mlakit.cuda_device_count() == 0:
    pytest.skip("needs a CUDA device and an mlakit build with CUDA: " +
                (mlakit.cuda_unavailable_reason() or "torch.cuda.is_available() is False"),
                allow_module_level=True)


def _latent_cuda_refusal():
    """Why LatentAttention is refused on CUDA device 0 (a GPU other than sm90, a build without the
    Hopper kernel), or None when a supported config (512 + 64, bf16) constructs."""
    try:
        mlakit.LatentAttention(16, dtype=torch.bfloat16, device="cuda", num_blocks=1, max_batch=1, max_q_tokens=1,
                               max_kv_tokens=64)
    except ValueError as e:
        major, minor = torch.cuda.get_device_capability(0)
        return f"{torch.cuda.get_device_name(0)} (sm_{major}{minor}): {e}"
    return None


_refusal = _latent_cuda_refusal()
if _refusal is not None:
    pytest.skip("LatentAttention on CUDA: " + _refusal, allow_module_level=True)

import mlakit.torch as mt  # noqa: E402
from kv_cache_spec import decode_cache, encode_cache  # noqa: E402

DEV = torch.device("cuda")
L, R = 512, 64
DEEPSEEK_SCALE = 192 ** -0.5


def tolerance(dtype):
    return 1e-2 if dtype == torch.bfloat16 else 2e-3


def make_table(kv_lens, bs, num_blocks, gen):
    """[batch, cols] host int32 table of distinct shuffled blocks (cols padded with -1)."""
    need = [(k + bs - 1) // bs for k in kv_lens]
    cols = max(need + [1]) + 1
    it = iter(torch.randperm(num_blocks, generator=gen).tolist())
    return torch.tensor([[next(it) for _ in range(n)] + [-1] * (cols - n) for n in need], dtype=torch.int32)


def randn(gen, *shape, dtype=torch.bfloat16, scale=1.0):
    """Normal values drawn on the host (reproducible), then moved to the GPU."""
    return (torch.randn(*shape, generator=gen) * scale).to(DEV, dtype)


def reference(q, cache, q_lens, kv_lens, table, scale, causal=True, indices=None, topk_length=None,
              kind="positions", sink=None):
    """out [T, H, L], lse [T, H], max [T, H] in float64 on the GPU, the plain way: per query token
    the cache rows it attends (dense: its visible positions; sparse: its valid entries, repeats
    included), a softmax over them, the sink."""
    bs = cache.shape[1]
    flat = cache.reshape(-1, L + R).double()
    T, H = sum(q_lens), q.shape[1]
    out = torch.zeros(T, H, L, dtype=torch.float64, device=DEV)
    lse = torch.full((T, H), -math.inf, dtype=torch.float64, device=DEV)
    mx = torch.full((T, H), -math.inf, dtype=torch.float64, device=DEV)
    idx = None if indices is None else indices.cpu().long()
    lens = None if topk_length is None else topk_length.cpu().long()
    t = 0
    for r, nq in enumerate(q_lens):
        kv = 0 if kv_lens is None else kv_lens[r]
        pos = torch.arange(kv)
        pos_slots = (table[r, pos // bs].long() * bs + pos % bs) if kv else pos
        for i in range(nq):
            if idx is None:
                visible = min(kv, max(0, kv - nq + i + 1)) if causal else kv
                slots = pos_slots[:visible]
            else:
                n = idx.shape[1] if lens is None else max(0, min(int(lens[t]), idx.shape[1]))
                row = idx[t, :n]
                if kind == "positions":
                    slots = pos_slots[row[(row >= 0) & (row < kv)]]
                else:
                    slots = row[(row >= 0) & (row < flat.shape[0])]
            if slots.numel():
                k = flat[slots.to(DEV)]
                s = q[t].double() @ k.T * scale  # [H, keys]
                lse[t] = torch.logsumexp(s, dim=-1)
                mx[t] = s.max(dim=-1).values
                o = torch.softmax(s, dim=-1) @ k[:, :L]
                if sink is not None:
                    o = o / (1 + torch.exp(sink.double() - lse[t])).unsqueeze(-1)
                out[t] = o
            t += 1
    return out, lse, mx


def check(out, lse, mx, ref, tol):
    """Rows of the plan: no NaN (every output was poisoned or freshly allocated), out within `tol`
    relative, key-less rows exactly 0 with lse (and max_logits) -inf, the rest within 1e-3."""
    ro, rl, rm = ref
    T = ro.shape[0]
    out, lse = out[:T], lse[:T]
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    err = ((out.double() - ro).norm() / ro.norm()).item()
    assert err < tol, err
    empty = torch.isinf(rl)
    assert torch.equal(torch.isinf(lse), empty)
    assert (out[empty] == 0).all()
    assert torch.isneginf(lse[empty]).all()
    assert torch.allclose(lse[~empty].double(), rl[~empty], atol=1e-3, rtol=1e-3)
    if mx is not None:
        mx = mx[:T]
        assert not torch.isnan(mx).any()
        assert torch.isneginf(mx[empty]).all()
        assert torch.allclose(mx[~empty].double(), rm[~empty], atol=1e-3, rtol=1e-3)


def latent(heads, bs, num_blocks, dtype=torch.bfloat16, max_batch=8, max_q_tokens=256, max_kv_tokens=8192,
           **kw):
    return mlakit.LatentAttention(heads, dtype=dtype, device="cuda", block_size=bs, num_blocks=num_blocks,
                                  max_batch=max_batch, max_q_tokens=max_q_tokens, max_kv_tokens=max_kv_tokens, **kw)


def blocks_for(kv_lens, bs, spare=3):
    return sum((k + bs - 1) // bs for k in kv_lens) + spare


@pytest.mark.parametrize("heads,bs,dtype", [(16, 64, torch.bfloat16), (128, 64, torch.bfloat16),
                                            (1, 1, torch.bfloat16), (16, 16, torch.float16),
                                            (128, 256, torch.float16)])
def test_decode(heads, bs, dtype):
    """Ragged decode: kv_len 0 (no key), 1, odd, around a 64-key tile, and ones that split."""
    gen = torch.Generator().manual_seed(heads * 31 + bs)
    kv_lens = [1, 0, 37, 64, 65, 700, 2100]
    q_lens = [1] * len(kv_lens)
    num_blocks = blocks_for(kv_lens, bs)
    cache = randn(gen, num_blocks, bs, L + R, dtype=dtype)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = randn(gen, len(q_lens), heads, L + R, dtype=dtype)
    attn = latent(heads, bs, num_blocks, dtype)
    attn.plan(q_lens, kv_lens, table, sm_scale=DEEPSEEK_SCALE)
    assert attn.info.kv_split_size == 512
    out, lse, mx = attn.run(q, cache, return_lse=True, return_max_logits=True)
    torch.cuda.synchronize()
    ref = reference(q, cache, q_lens, kv_lens, table, DEEPSEEK_SCALE)
    check(out, lse, mx, ref, tolerance(dtype))
    # [H, T] buffers hold the same values; out the same bits.
    out2, lse2, mx2 = attn.run(q, cache, return_lse=True, return_max_logits=True, lse_layout="ht")
    torch.cuda.synchronize()
    assert lse2.shape == (heads, len(q_lens))
    assert torch.equal(lse2.T, lse) and torch.equal(mx2.T, mx) and torch.equal(out2, out)


@pytest.mark.parametrize("heads", [16, 128])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_mtp_and_extend(heads, causal):
    """2, 4, 7 and 64 new tokens (bottom-right causal or not) and a decode; the 7-token request's
    cache of 5 leaves its first two rows key-less when causal. q as q_nope + q_pe, with sinks."""
    gen = torch.Generator().manual_seed(heads + 2 * causal)
    q_lens, kv_lens, bs = [2, 4, 7, 64, 1], [2, 300, 5, 130, 900], 64
    num_blocks = blocks_for(kv_lens, bs)
    cache = randn(gen, num_blocks, bs, L + R)
    table = make_table(kv_lens, bs, num_blocks, gen)
    T = sum(q_lens)
    q = randn(gen, T, heads, L + R)
    sink = randn(gen, heads, dtype=torch.float32, scale=2.0)
    attn = latent(heads, bs, num_blocks)
    attn.plan(q_lens, kv_lens, table, causal=causal, sm_scale=DEEPSEEK_SCALE)
    out = torch.full((T, heads, L), float("nan"), device=DEV, dtype=torch.bfloat16)
    lse = torch.full((T, heads), float("nan"), device=DEV)
    mx = torch.full((T, heads), float("nan"), device=DEV)
    attn.run(q[..., :L].contiguous(), cache, q_pe=q[..., L:].contiguous(), attn_sink=sink, out=out, lse=lse,
             max_logits=mx)
    torch.cuda.synchronize()
    ref = reference(q, cache, q_lens, kv_lens, table, DEEPSEEK_SCALE, causal=causal, sink=sink)
    check(out, lse, mx, ref, 1e-2)
    joint = attn.run(q, cache, attn_sink=sink)
    torch.cuda.synchronize()
    assert torch.equal(joint, out)


@pytest.mark.parametrize("heads", [16, 128])
@pytest.mark.parametrize("kind", ["positions", "slots"])
def test_sparse(kind, heads):
    """Index rows with -1 padding, a repeat, the first and last key, entries past the bound;
    topk_length 0, past topk and anything between; a request with an empty cache."""
    gen = torch.Generator().manual_seed(7 + heads)
    q_lens, kv_lens, bs, topk = [1, 2, 8, 1], [900, 60, 2000, 0], 16, 512
    num_blocks = blocks_for(kv_lens, bs)
    cache = randn(gen, num_blocks, bs, L + R)
    table = make_table(kv_lens, bs, num_blocks, gen)
    T = sum(q_lens)
    q = randn(gen, T, heads, L + R)
    rows = []
    for r, (nq, kv) in enumerate(zip(q_lens, kv_lens)):
        bound = kv if kind == "positions" else num_blocks * bs
        for _ in range(nq):
            row = torch.randint(0, max(bound, 1), (topk,), generator=gen) if bound else torch.full((topk,), -1)
            if bound:
                row[0], row[1] = 0, bound - 1    # the first and last key
                row[3] = row[0]                  # a repeat
                row[5] = bound                   # past the bound: skipped
            row[-50:] = -1                       # the indexer's padding
            rows.append(row)
    indices = torch.stack(rows).to(DEV, torch.int32)
    topk_length = torch.randint(0, topk + 1, (T,), generator=gen)
    topk_length[0], topk_length[1], topk_length[2] = topk, 0, topk + 9
    topk_length = topk_length.to(DEV, torch.int32)
    attn = latent(heads, bs, num_blocks, max_topk=2048)
    attn.plan(q_lens, kv_lens if kind == "positions" else None, table if kind == "positions" else None,
              topk=topk, indices=kind)
    assert attn.info.sparse and attn.info.topk == topk
    out, lse, mx = attn.run(q, cache, indices=indices, topk_length=topk_length, return_lse=True,
                            return_max_logits=True)
    torch.cuda.synchronize()
    ref = reference(q, cache, q_lens, kv_lens, table, (L + R) ** -0.5, indices=indices, topk_length=topk_length,
                    kind=kind)
    check(out, lse, mx, ref, 1e-2)


def test_repeatable_and_batch_invariant():
    """Run after run the same bits; with batch_invariant, each request alone the bits it gets
    inside the batch."""
    gen = torch.Generator().manual_seed(11)
    q_lens, kv_lens, bs, heads = [1, 3, 1, 64, 2], [1800, 40, 520, 300, 2], 16, 16
    num_blocks = blocks_for(kv_lens, bs)
    cache = randn(gen, num_blocks, bs, L + R)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = randn(gen, sum(q_lens), heads, L + R)
    attn = latent(heads, bs, num_blocks)
    attn.plan(q_lens, kv_lens, table, batch_invariant=True)
    out, lse = attn.run(q, cache, return_lse=True)
    again, lse_again = attn.run(q, cache, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, again) and torch.equal(lse, lse_again)
    t0 = 0
    for r, (nq, kv) in enumerate(zip(q_lens, kv_lens)):
        attn.plan([nq], [kv], table[r:r + 1], batch_invariant=True)
        alone, lse_alone = attn.run(q[t0:t0 + nq], cache, return_lse=True)
        torch.cuda.synchronize()
        assert torch.equal(alone, out[t0:t0 + nq]), r
        assert torch.equal(lse_alone, lse[t0:t0 + nq]), r
        t0 += nq


def test_device_block_table_gives_the_same_bits():
    """The engine's block table on the GPU (a slice of a wider one): run() reads it, the same bits
    as the host table plan() copies; a table whose rows are not contiguous, or not int32, is
    refused."""
    gen = torch.Generator().manual_seed(12)
    q_lens, kv_lens, bs, heads = [1, 3, 64, 2], [1800, 40, 300, 2], 16, 16
    num_blocks = blocks_for(kv_lens, bs)
    cache = randn(gen, num_blocks, bs, L + R)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = randn(gen, sum(q_lens), heads, L + R)
    attn = latent(heads, bs, num_blocks)
    attn.plan(q_lens, kv_lens, table)
    host_out, host_lse = attn.run(q, cache, return_lse=True)
    wide = torch.full((len(q_lens), table.shape[1] + 5), -1, dtype=torch.int32, device=DEV)
    wide[:, :table.shape[1]] = table.to(DEV)
    attn.plan(q_lens, kv_lens, wide[:, :table.shape[1]])  # rows at the wider stride
    dev_out, dev_lse = attn.run(q, cache, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(dev_out, host_out) and torch.equal(dev_lse, host_lse)
    with pytest.raises(ValueError, match="^mlakit: block_table: on a GPU must be a 2-D int32"):
        attn.plan(q_lens, kv_lens, wide[:, ::2])  # rows not contiguous
    with pytest.raises(TypeError, match="^mlakit: block_table: unsupported dtype int64"):
        attn.plan(q_lens, kv_lens, wide.to(torch.int64))


def test_torch_ops_match_run():
    gen = torch.Generator().manual_seed(5)
    q_lens, kv_lens, bs, heads = [1, 2], [1300, 40], 64, 16
    num_blocks = blocks_for(kv_lens, bs)
    cache = randn(gen, num_blocks, bs, L + R)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = randn(gen, 3, heads, L + R)
    attn = latent(heads, bs, num_blocks)
    attn.plan(q_lens, kv_lens, table)
    want, want_lse = attn.run(q, cache, return_lse=True)
    assert torch.equal(torch.ops.mlakit.latent_attention(q, cache, attn.handle), want)
    out, lse = torch.ops.mlakit.latent_attention_with_lse(q, cache, attn.handle, lse_head_major=True)
    assert torch.equal(out, want) and torch.equal(lse.T, want_lse)
    buf = torch.full_like(want, float("nan"))
    lbuf = torch.full_like(want_lse, float("nan"))
    mt.latent_attention_out(attn, q, cache, buf, lbuf)
    torch.cuda.synchronize()
    assert torch.equal(buf, want) and torch.equal(lbuf, want_lse)


BUCKET, GRAPH_BLOCKS, GRAPH_BS, GRAPH_HEADS = 160, 200, 16, 16


@pytest.mark.parametrize("upload_in_run", [False, True], ids=["upload_in_plan", "upload_in_run"])
def test_graph_replay_after_replan(upload_in_run):
    """run() captured once in a torch.cuda.CUDAGraph under another plan than any replay's; per set of
    lengths: new inputs in the captured buffers, outputs poisoned, a re-plan, one replay. Rows of
    the plan must be written and right, rows past it untouched."""
    sets = [([1, 1, 4, 1], [700, 1, 30, 0]), ([129, 2], [400, 2]), ([1, 7, 1, 64, 1, 1], [1500, 70, 64, 65, 3, 600])]
    gen = torch.Generator().manual_seed(13)
    attn = latent(GRAPH_HEADS, GRAPH_BS, GRAPH_BLOCKS, max_batch=8, max_q_tokens=BUCKET, max_kv_tokens=4096,
                  upload_in_run=upload_in_run)
    q = randn(gen, BUCKET, GRAPH_HEADS, L + R)
    cache = randn(gen, GRAPH_BLOCKS, GRAPH_BS, L + R)
    out = torch.empty(BUCKET, GRAPH_HEADS, L, device=DEV, dtype=torch.bfloat16)
    lse = torch.empty(BUCKET, GRAPH_HEADS, device=DEV)
    last_q, last_kv = sets[-1]
    attn.plan(last_q, last_kv, make_table(last_kv, GRAPH_BS, GRAPH_BLOCKS, gen))
    attn.run(q, cache, out=out, lse=lse)  # one-time kernel setup outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        attn.run(q, cache, out=out, lse=lse)
    for q_lens, kv_lens in sets:
        q.copy_(randn(gen, BUCKET, GRAPH_HEADS, L + R))
        cache.copy_(randn(gen, GRAPH_BLOCKS, GRAPH_BS, L + R))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        table = make_table(kv_lens, GRAPH_BS, GRAPH_BLOCKS, gen)
        attn.plan(q_lens, kv_lens, table)
        g.replay()
        torch.cuda.synchronize()
        T = sum(q_lens)
        check(out, lse, None, reference(q, cache, q_lens, kv_lens, table, (L + R) ** -0.5), 1e-2)
        assert out[T:].isnan().all() and lse[T:].isnan().all()


def assert_matches_twin(out, lse, out2, lse2):
    """The FP8 kernel's result against the 16-bit kernel's over the decoded rows: the same
    attention but for the order of additions and of P's rounding, so within 1% of the outputs'
    largest value (a misdecoded value is off by its own size), lse within 1e-3, -inf alike."""
    assert not out.isnan().any() and not out2.isnan().any()
    assert (out.float() - out2.float()).abs().max() <= 1e-2 * out2.float().abs().max()
    assert torch.equal(lse.isinf(), lse2.isinf())
    fin = lse2.isfinite()
    assert (lse[fin] - lse2[fin]).abs().max() <= 1e-3


@pytest.mark.parametrize("heads", [16, 128])
def test_fp8_ds_mla_cache(heads):
    """Dense decode + MTP and sparse over an fp8_ds_mla cache: against the float64 reference of the
    decoded rows, and beside the run over the bf16 cache the rows decode to."""
    gen = torch.Generator().manual_seed(21 + heads)
    q_lens, kv_lens, bs, topk = [1, 2, 1, 4], [1500, 70, 0, 600], 64, 512
    num_blocks = blocks_for(kv_lens, bs)
    c8 = encode_cache("fp8_ds_mla", randn(gen, num_blocks, bs, L + R))  # FlashMLA's quantizer
    table = make_table(kv_lens, bs, num_blocks, gen)
    T = sum(q_lens)
    q = randn(gen, T, heads, L + R)
    indices = torch.stack([torch.randint(-1, max(kv, 1), (topk,), generator=gen)
                           for nq, kv in zip(q_lens, kv_lens) for _ in range(nq)]).to(DEV, torch.int32)
    fp8 = latent(heads, bs, num_blocks, max_topk=topk, kv_cache_dtype="fp8_ds_mla")
    bf16 = latent(heads, bs, num_blocks, max_topk=topk)
    decoded = decode_cache("fp8_ds_mla", c8)
    twin = decoded.to(torch.bfloat16)  # exact: the scales are powers of two
    for sparse in (False, True):
        idx = indices if sparse else None
        for attn in (fp8, bf16):
            attn.plan(q_lens, kv_lens, table, topk=topk if sparse else 0)
        out, lse = fp8.run(q, c8, indices=idx, return_lse=True)
        out2, lse2 = bf16.run(q, twin, indices=idx, return_lse=True)
        torch.cuda.synchronize()
        assert_matches_twin(out, lse, out2, lse2)
        check(out, lse, None, reference(q, decoded, q_lens, kv_lens, table, (L + R) ** -0.5,
                                        indices=idx), 1e-2)


def test_batch_that_fills_the_gpu_splits_less():
    """128 decodes over 2048 keys at 128 heads: the default plan runs whole requests (2048 keys
    a split: 256 items, about two an SM, no merges; four of 512 an SM cost four starts),
    batch_invariant splits by the config's 512; both match the reference on a sample of
    requests and each other within bf16 rounding."""
    gen = torch.Generator().manual_seed(41)
    heads, bs, batch, kv = 128, 64, 128, 2048
    kv_lens, q_lens = [kv] * batch, [1] * batch
    num_blocks = blocks_for(kv_lens, bs)
    cache = randn(gen, num_blocks, bs, L + R)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = randn(gen, batch, heads, L + R)
    attn = latent(heads, bs, num_blocks, max_batch=batch, max_q_tokens=batch, max_kv_tokens=batch * kv)
    outs = {}
    for invariant in (False, True):
        attn.plan(q_lens, kv_lens, table, batch_invariant=invariant)
        info = attn.info
        want = 512 if invariant else 2048
        assert info.kv_split_size == want, (invariant, info.kv_split_size)
        outs[invariant] = attn.run(q, cache, return_lse=True)
    torch.cuda.synchronize()
    (o1, l1), (o2, l2) = outs[False], outs[True]
    assert (o1.float() - o2.float()).abs().max() <= 1e-2 * o2.float().abs().max()
    assert (l1 - l2).abs().max() <= 1e-3
    pick = [0, 77, batch - 1]
    ref = reference(q[pick], cache, [1] * len(pick), [kv] * len(pick), table[pick], (L + R) ** -0.5)
    check(o1[pick], l1[pick], None, ref, 1e-2)


def test_fp8_cache_with_layer_scale():
    """vLLM's fp8 cache (one e4m3 code a value, the layer's scale on the device, read at run):
    against the reference of the decoded rows and beside the run over the bf16 cache they decode
    to; the custom op with k_scale."""
    gen = torch.Generator().manual_seed(31)
    q_lens, kv_lens, bs, heads = [1, 2, 1, 4], [1500, 70, 1, 600], 16, 16
    num_blocks = blocks_for(kv_lens, bs)
    scale = torch.tensor([0.0123], dtype=torch.float32, device=DEV)
    c8 = encode_cache("fp8", randn(gen, num_blocks, bs, L + R), scale).view(torch.float8_e4m3fn)
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = randn(gen, sum(q_lens), heads, L + R)
    fp8 = latent(heads, bs, num_blocks, kv_cache_dtype="fp8")
    bf16 = latent(heads, bs, num_blocks)
    for attn in (fp8, bf16):
        attn.plan(q_lens, kv_lens, table)
    out, lse = fp8.run(q, c8, k_scale=scale, return_lse=True)
    out2, lse2 = bf16.run(q, (c8.float() * scale).to(torch.bfloat16), return_lse=True)
    torch.cuda.synchronize()
    assert_matches_twin(out, lse, out2, lse2)
    # The reference over the values attended: code x scale rounded once to bf16 (the scale is no
    # power of two, so exact products would differ by that rounding).
    check(out, lse, None, reference(q, (c8.float() * scale).to(torch.bfloat16), q_lens, kv_lens, table,
                                    (L + R) ** -0.5), 1e-2)
    assert torch.equal(torch.ops.mlakit.latent_attention(q, c8.view(torch.uint8), fp8.handle, k_scale=scale), out)


def test_fp8_rows_decoded_once():
    """max_decoded_rows on the fp8_ds_mla cache: an extend and a DSA prefill at 128 heads decode
    their rows once into the workspace (info.decoded_rows) and give the bits of the 16-bit kernel on
    the rows they decode to; fp8_decode="in_kernel" decodes them in the kernel instead."""
    gen = torch.Generator().manual_seed(41)
    q_lens, kv_lens, bs, heads, topk = [32, 3, 20], [700, 90, 400], 16, 128, 256
    num_blocks = blocks_for(kv_lens, bs)
    c8 = encode_cache("fp8_ds_mla", randn(gen, num_blocks, bs, L + R))
    table = make_table(kv_lens, bs, num_blocks, gen)
    q = randn(gen, sum(q_lens), heads, L + R)
    indices = torch.stack([torch.randint(-1, kv, (topk,), generator=gen)
                           for nq, kv in zip(q_lens, kv_lens) for _ in range(nq)]).to(DEV, torch.int32)
    fp8 = latent(heads, bs, num_blocks, max_topk=topk, kv_cache_dtype="fp8_ds_mla", max_decoded_rows=4096)
    bf16 = latent(heads, bs, num_blocks, max_topk=topk)
    assert fp8.max_decoded_rows == 4096
    decoded = decode_cache("fp8_ds_mla", c8)
    twin = decoded.to(torch.bfloat16)  # exact: the scales are powers of two
    for sparse in (False, True):
        idx = indices if sparse else None
        k = topk if sparse else 0
        bf16.plan(q_lens, kv_lens, table, topk=k)
        out2, lse2 = bf16.run(q, twin, indices=idx, return_lse=True)
        fp8.plan(q_lens, kv_lens, table, topk=k)
        assert fp8.info.decoded_rows == sum((n + 63) // 64 * 64 for n in kv_lens)
        out, lse = fp8.run(q, c8, indices=idx, return_lse=True)
        torch.cuda.synchronize()
        assert torch.equal(out, out2) and torch.equal(lse, lse2)
        check(out, lse, None, reference(q, decoded, q_lens, kv_lens, table, (L + R) ** -0.5, indices=idx), 1e-2)
        fp8.plan(q_lens, kv_lens, table, topk=k, fp8_decode="in_kernel")
        assert fp8.info.decoded_rows == 0
        out3, lse3 = fp8.run(q, c8, indices=idx, return_lse=True)
        torch.cuda.synchronize()
        assert_matches_twin(out3, lse3, out2, lse2)


def test_other_widths_are_refused():
    """The kernel runs kv_lora_rank 512 with qk_rope_head_dim 64 only."""
    with pytest.raises(ValueError, match="^mlakit: config.kv_lora_rank"):
        latent(16, 64, 4, kv_lora_rank=256)
