"""mlakit.flash_mla (FlashMLA's interface) on the CPU against the float64 reference of
test_latent_cpu: dense decode and MTP (causal and not, pages of 1 and 64, a request over an empty
cache), sparse decode by global slots with topk_length per request and a sink, on the 16-bit and
the fp8_ds_mla cache, flash_mla_sparse_fwd over flat rows (entries -1 and past s_kv skipped,
topk_length per token), FlashMLA's layouts and its +inf LSE for rows that see no key, one schedule
serving a step's layers and refusing other shapes, two schedules alive at once, and the
arguments mlakit does not take."""
import gc
import math

import pytest

torch = pytest.importorskip("torch")
import mlakit.flash_mla as flash_mla  # noqa: E402
from kv_cache_spec import decode_cache, encode_cache  # noqa: E402
from test_latent_cpu import L, R, make_cache, make_table, reference  # noqa: E402


def as_flashmla_cache(cache):
    """[num_blocks, page, D] -> FlashMLA's [num_blocks, page, 1, D]."""
    return cache.unsqueeze(2)


def check_flashmla(out, lse, ref, b, s_q, h, tol=1e-2):
    """out [b, s_q, h, 512], lse [b, h, s_q] (+inf where no key) against the [T, H] reference."""
    ro, rl, _ = ref
    assert out.shape == (b, s_q, h, L) and lse.shape == (b, h, s_q) and lse.is_contiguous()
    out = out.reshape(b * s_q, h, L)
    lse = lse.permute(0, 2, 1).reshape(b * s_q, h)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    empty = torch.isinf(rl)
    assert (lse[empty] == math.inf).all(), "FlashMLA's LSE of a row that sees no key is +inf"
    assert (out[empty] == 0).all()
    assert torch.isfinite(lse[~empty]).all()
    assert torch.allclose(lse[~empty].double(), rl[~empty], atol=1e-3, rtol=1e-3)
    err = (out.double() - ro).norm() / ro.norm()
    assert err < tol, err


@pytest.mark.parametrize("page", [1, 64])
@pytest.mark.parametrize("s_q,causal", [(1, False), (2, True), (4, True), (3, False)])
def test_dense_decode_and_mtp(page, s_q, causal):
    gen = torch.Generator().manual_seed(page * 10 + s_q)
    h = 16
    kv_lens = [300, 1, 0, 129][: 4] if s_q == 1 else [300, s_q, 2, 129]  # 2 < s_q: early rows see no key
    b = len(kv_lens)
    num_blocks = sum((k + page - 1) // page for k in kv_lens) + 4
    cache = make_cache(num_blocks, page, gen)
    table = make_table(kv_lens, page, num_blocks, gen)
    q = torch.randn(b, s_q, h, L + R, generator=gen).to(torch.bfloat16)
    seqlens = torch.tensor(kv_lens, dtype=torch.int32)
    sched, none = flash_mla.get_mla_metadata(seqlens, s_q * h, 1)  # the older interface's arguments
    assert none is None
    out, lse = flash_mla.flash_mla_with_kvcache(q, as_flashmla_cache(cache), table, seqlens, 512, sched,
                                                causal=causal)
    ref = reference(q.reshape(b * s_q, h, L + R), cache, [s_q] * b, kv_lens, table, (L + R) ** -0.5, causal=causal)
    check_flashmla(out, lse, ref, b, s_q, h)
    # The step's next layer: same schedule, another layer's q and cache.
    cache2 = make_cache(num_blocks, page, gen)
    q2 = torch.randn(b, s_q, h, L + R, generator=gen).to(torch.bfloat16)
    out2, lse2 = flash_mla.flash_mla_with_kvcache(q2, as_flashmla_cache(cache2), table, seqlens, 512, sched,
                                                  causal=causal)
    ref2 = reference(q2.reshape(b * s_q, h, L + R), cache2, [s_q] * b, kv_lens, table, (L + R) ** -0.5,
                     causal=causal)
    check_flashmla(out2, lse2, ref2, b, s_q, h)


def test_scale_and_a_schedule_of_another_shape():
    gen = torch.Generator().manual_seed(5)
    h, page, kv_lens = 8, 16, [100, 40]
    cache = make_cache(16, page, gen)
    table = make_table(kv_lens, page, 16, gen)
    q = torch.randn(2, 1, h, L + R, generator=gen).to(torch.bfloat16)
    seqlens = torch.tensor(kv_lens, dtype=torch.int32)
    sched, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, as_flashmla_cache(cache), table, seqlens, 512, sched,
                                                softmax_scale=0.07)
    check_flashmla(out, lse, reference(q.reshape(2, h, L + R), cache, [1, 1], kv_lens, table, 0.07), 2, 1, h)
    with pytest.raises(ValueError, match="tile_scheduler_metadata"):
        flash_mla.flash_mla_with_kvcache(q[:1], as_flashmla_cache(cache), table[:1], seqlens[:1], 512, sched)
    with pytest.raises(ValueError, match="tile_scheduler_metadata"):
        flash_mla.flash_mla_with_kvcache(q, as_flashmla_cache(cache), table, seqlens, 512, sched, causal=True)


def test_two_schedules_alive_at_once_keep_their_plans():
    gen = torch.Generator().manual_seed(6)
    h, page = 16, 64
    lens_a, lens_b = [500, 70, 3], [9, 300, 256]  # b fits the capacity a asked for
    cache = make_cache(40, page, gen)
    ta, tb = make_table(lens_a, page, 40, gen), make_table(lens_b, page, 40, gen)
    q = torch.randn(3, 1, h, L + R, generator=gen).to(torch.bfloat16)
    sa, _ = flash_mla.get_mla_metadata()
    sb, _ = flash_mla.get_mla_metadata()
    sa_len, sb_len = torch.tensor(lens_a, dtype=torch.int32), torch.tensor(lens_b, dtype=torch.int32)
    flash_mla.flash_mla_with_kvcache(q, as_flashmla_cache(cache), ta, sa_len, 512, sa)
    flash_mla.flash_mla_with_kvcache(q, as_flashmla_cache(cache), tb, sb_len, 512, sb)
    out, lse = flash_mla.flash_mla_with_kvcache(q, as_flashmla_cache(cache), ta, sa_len, 512, sa)
    check_flashmla(out, lse, reference(q.reshape(3, h, L + R), cache, [1] * 3, lens_a, ta, (L + R) ** -0.5),
                   3, 1, h)
    # A dropped schedule's object serves the next one.
    del sa, sb
    gc.collect()
    sc, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, as_flashmla_cache(cache), tb, sb_len, 512, sc)
    check_flashmla(out, lse, reference(q.reshape(3, h, L + R), cache, [1] * 3, lens_b, tb, (L + R) ** -0.5),
                   3, 1, h)


@pytest.mark.parametrize("fp8", [False, True])
def test_sparse_decode_by_slots(fp8):
    gen = torch.Generator().manual_seed(7 + fp8)
    b, s_q, h, page, topk = 3, 2, 16, 64, 128
    num_blocks = 12
    cache = make_cache(num_blocks, page, gen)
    rows = num_blocks * page
    idx = torch.randint(0, rows, (b, s_q, topk), generator=gen, dtype=torch.int32)
    idx[0, 0, 5:40] = -1
    idx[1, 1, :] = -1                                  # a token that sees no key
    idx[2, 0, 7] = rows + 3                            # past the cache: skipped
    topk_length = torch.tensor([topk, 90, 17], dtype=torch.int32)  # per request, as FlashMLA's
    sink = torch.randn(h, generator=gen)
    q = torch.randn(b, s_q, h, L + R, generator=gen).to(torch.bfloat16)
    if fp8:
        k_cache = encode_cache("fp8_ds_mla", cache)
        ref_cache = decode_cache("fp8_ds_mla", k_cache)
    else:
        k_cache, ref_cache = cache, cache
    sched, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, as_flashmla_cache(k_cache), None, None, 512, sched,
                                                is_fp8_kvcache=fp8, indices=idx, attn_sink=sink,
                                                topk_length=topk_length)
    flat_idx = idx.reshape(b * s_q, topk)
    ref = reference(q.reshape(b * s_q, h, L + R), ref_cache, [s_q] * b, [0] * b, None, (L + R) ** -0.5,
                    indices=flat_idx, topk_length=topk_length.repeat_interleave(s_q), kind="slots", sink=sink)
    check_flashmla(out, lse, ref, b, s_q, h)
    # The step's next layer: the same schedule, indices and lengths; another q.
    q2 = torch.randn(b, s_q, h, L + R, generator=gen).to(torch.bfloat16)
    out2, lse2 = flash_mla.flash_mla_with_kvcache(q2, as_flashmla_cache(k_cache), None, None, 512, sched,
                                                  is_fp8_kvcache=fp8, indices=idx, attn_sink=sink,
                                                  topk_length=topk_length)
    ref2 = reference(q2.reshape(b * s_q, h, L + R), ref_cache, [s_q] * b, [0] * b, None, (L + R) ** -0.5,
                     indices=flat_idx, topk_length=topk_length.repeat_interleave(s_q), kind="slots", sink=sink)
    check_flashmla(out2, lse2, ref2, b, s_q, h)


def test_sparse_prefill_over_flat_rows():
    gen = torch.Generator().manual_seed(9)
    s_q, s_kv, h, topk = 20, 300, 16, 64
    kv = torch.randn(s_kv, 1, L + R, generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, s_kv, (s_q, 1, topk), generator=gen, dtype=torch.int32)
    idx[3, 0, :] = -1                                  # no key
    idx[4, 0, :10] = s_kv                              # >= s_kv: skipped
    idx[5, 0, 20:] = -1
    topk_length = torch.randint(0, topk + 1, (s_q,), generator=gen, dtype=torch.int32)
    topk_length[6] = 0
    q = torch.randn(s_q, h, L + R, generator=gen).to(torch.bfloat16)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(q, kv, idx, 0.05, topk_length=topk_length)
    ro, rl, rm = reference(q, kv, [s_q], [0], None, 0.05, indices=idx.reshape(s_q, topk), topk_length=topk_length,
                           kind="slots")
    assert out.shape == (s_q, h, L) and max_logits.shape == (s_q, h) and lse.shape == (s_q, h)
    empty = torch.isinf(rl)
    assert empty[3].all() and empty[6].all()
    assert (lse[empty] == math.inf).all() and (max_logits[empty] == -math.inf).all() and (out[empty] == 0).all()
    assert torch.allclose(lse[~empty].double(), rl[~empty], atol=1e-3, rtol=1e-3)
    assert torch.allclose(max_logits[~empty].double(), rm[~empty], atol=1e-3, rtol=1e-3)
    assert (out.double() - ro).norm() / ro.norm() < 1e-2


def test_what_mlakit_does_not_take():
    gen = torch.Generator().manual_seed(11)
    cache = make_cache(4, 16, gen)
    q = torch.randn(1, 1, 16, L + R, generator=gen).to(torch.bfloat16)
    table = torch.zeros(1, 4, dtype=torch.int32)
    seqlens = torch.tensor([10], dtype=torch.int32)
    sched, _ = flash_mla.get_mla_metadata()
    k = as_flashmla_cache(cache)
    with pytest.raises(ValueError, match="extra_k_cache"):
        flash_mla.flash_mla_with_kvcache(q, k, table, seqlens, 512, sched, extra_k_cache=k)
    with pytest.raises(ValueError, match="num_splits"):
        flash_mla.flash_mla_with_kvcache(q, k, table, seqlens, 512, sched, num_splits=4)
    with pytest.raises(ValueError, match="head_dim_v"):
        flash_mla.flash_mla_with_kvcache(q, k, table, seqlens, 128, sched)
    with pytest.raises(ValueError, match="causal"):
        flash_mla.flash_mla_with_kvcache(q, k, None, None, 512, sched, causal=True,
                                         indices=torch.zeros(1, 1, 64, dtype=torch.int32))
    with pytest.raises(ValueError, match="k_cache"):
        flash_mla.flash_mla_with_kvcache(q, cache, table, seqlens, 512, sched)
    with pytest.raises(ValueError, match="tile_scheduler_metadata"):
        flash_mla.flash_mla_with_kvcache(q, k, table, seqlens, 512, None)
    with pytest.raises(ValueError, match="indexer_topk"):
        flash_mla.flash_mla_sparse_fwd(q[0], cache.reshape(-1, 1, L + R), torch.zeros(1, 1, 64, dtype=torch.int32),
                                       0.1, indexer_topk=512)
    assert not sched.have_initialized  # every refusal came before planning
