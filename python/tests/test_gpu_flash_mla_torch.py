"""mlakit.flash_mla (FlashMLA's interface) on the Hopper kernel, with PyTorch CUDA tensors: dense
decode and MTP (page 64 with the engine's block table on the GPU, page 16), sparse decode on the
fp8_ds_mla cache and sparse prefill over flat rows, against the float64 reference of
test_gpu_latent_torch; and, where FlashMLA itself is installed, against FlashMLA on the same
inputs (page 64: out within bf16 rounding, the same LSE layout and values). Skipped as
test_gpu_latent_torch is (no sm90 GPU, no kernel in the build)."""
import math

import pytest

torch = pytest.importorskip("torch")
from test_gpu_latent_torch import DEV, L, R, make_table, randn, reference  # noqa: E402  (skips with it)

import mlakit.flash_mla as flash_mla  # noqa: E402
from kv_cache_spec import decode_cache, encode_cache  # noqa: E402
from test_flash_mla_cpu import check_flashmla as check  # noqa: E402  (device-agnostic)

try:
    import flash_mla as peer  # the real FlashMLA, when the machine has it
except ImportError:
    peer = None


@pytest.mark.parametrize("h,s_q,page", [(16, 1, 64), (128, 1, 64), (16, 4, 64), (128, 2, 16)])
def test_dense(h, s_q, page):
    gen = torch.Generator().manual_seed(h + s_q + page)
    kv_lens = [1000, 3, 4096, 65, 777]
    b = len(kv_lens)
    num_blocks = sum((k + page - 1) // page for k in kv_lens) + 3
    cache = randn(gen, num_blocks, page, L + R)
    table = make_table(kv_lens, page, num_blocks, gen)
    q = randn(gen, b, s_q, h, L + R)
    seqlens = torch.tensor(kv_lens, dtype=torch.int32, device=DEV)
    table_dev = table.to(DEV)
    sched, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, cache.unsqueeze(2), table_dev, seqlens, 512, sched,
                                                causal=s_q > 1)
    torch.cuda.synchronize()
    assert out.shape == (b, s_q, h, L) and lse.shape == (b, h, s_q)
    check(out, lse, reference(q.reshape(b * s_q, h, L + R), cache, [s_q] * b, kv_lens, table, (L + R) ** -0.5,
                              causal=s_q > 1), b, s_q, h)
    if peer is not None and page == 64:
        psched, _ = peer.get_mla_metadata()
        pout, plse = peer.flash_mla_with_kvcache(q, cache.unsqueeze(2), table_dev, seqlens, 512, psched,
                                                 causal=s_q > 1)
        torch.cuda.synchronize()
        assert (out.float() - pout.float()).abs().max() <= 1e-2 * pout.float().abs().max()
        assert torch.allclose(lse, plse, atol=1e-3, rtol=1e-3)


def test_sparse_decode_fp8_and_sparse_prefill():
    gen = torch.Generator().manual_seed(3)
    b, s_q, h, page, topk = 4, 2, 64, 64, 256
    num_blocks = 40
    cache16 = randn(gen, num_blocks, page, L + R)
    k_cache = encode_cache("fp8_ds_mla", cache16.cpu()).to(DEV)
    decoded = decode_cache("fp8_ds_mla", k_cache.cpu()).to(DEV)
    rows = num_blocks * page
    idx = torch.randint(0, rows, (b, s_q, topk), generator=gen, dtype=torch.int32)
    idx[1, 0, :] = -1
    idx = idx.to(DEV)
    topk_length = torch.tensor([topk, 100, 7, 200], dtype=torch.int32, device=DEV)
    q = randn(gen, b, s_q, h, L + R)
    sched, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache.unsqueeze(2), None, None, 512, sched, is_fp8_kvcache=True,
                                                indices=idx, topk_length=topk_length)
    torch.cuda.synchronize()
    check(out, lse, reference(q.reshape(b * s_q, h, L + R), decoded, [s_q] * b, [0] * b, None, (L + R) ** -0.5,
                              indices=idx.reshape(b * s_q, topk), topk_length=topk_length.repeat_interleave(s_q),
                              kind="slots"), b, s_q, h)
    # Sparse prefill: the flat bf16 rows.
    kv = cache16.reshape(-1, 1, L + R)
    pidx = idx.reshape(b * s_q, 1, topk)
    qp = q.reshape(b * s_q, h, L + R)
    pout, pmax, plse = flash_mla.flash_mla_sparse_fwd(qp, kv, pidx, 0.05)
    torch.cuda.synchronize()
    ro, rl, rm = reference(qp, cache16, [b * s_q], [0], None, 0.05, indices=pidx.reshape(b * s_q, topk), kind="slots")
    empty = torch.isinf(rl)
    assert (plse[empty] == math.inf).all() and (pmax[empty] == -math.inf).all()
    assert torch.allclose(plse[~empty].double(), rl[~empty], atol=1e-3, rtol=1e-3)
    assert (pout.double() - ro).norm() / ro.norm() < 1e-2
