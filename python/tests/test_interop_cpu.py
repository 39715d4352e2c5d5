"""Other DLPack producers than NumPy and PyTorch: JAX CPU arrays go in without copies and give
the same result as the NumPy path (skipped where JAX is not installed)."""
import numpy as np
import pytest

import mlakit
from attn_ref import make_problem, numpy_attention

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def cpu_array(x):
    """A JAX array on the host: where JAX has a GPU (the device machine) it defaults to it."""
    return jax.device_put(jnp.asarray(x), jax.devices("cpu")[0])


def test_jax_cpu_arrays_match_numpy_and_reference(rng):
    q_lens, kv_lens = [5, 0, 130, 1], [40, 3, 130, 9]
    q, k, v, qo, kv = make_problem(rng, "fp16", 4, 2, 64, 64, q_lens, kv_lens)
    p = mlakit.RaggedPrefill(num_qo_heads=4, num_kv_heads=2, head_dim_qk=64, head_dim_vo=64,
                             dtype="fp16", device="cpu", max_batch=4, max_q_tokens=qo[-1],
                             max_kv_tokens=kv[-1])
    p.plan(qo, kv, causal=True)
    out_np = p.run(q, k, v)
    out_jax = p.run(cpu_array(q), cpu_array(k), cpu_array(v))  # read-only JAX inputs
    np.testing.assert_array_equal(np.asarray(out_jax), out_np)
    ref, _ = numpy_attention(q, k, v, qo, kv, causal=True)
    err = np.linalg.norm(np.asarray(out_jax, np.float64) - ref) / np.linalg.norm(ref)
    assert err < 2e-3


def test_jax_wrong_dtype_is_a_type_error():
    p = mlakit.RaggedPrefill(num_qo_heads=1, num_kv_heads=1, head_dim_qk=64, head_dim_vo=64,
                             dtype="fp16", device="cpu", max_batch=1, max_q_tokens=4,
                             max_kv_tokens=4)
    p.plan([0, 4], [0, 4])
    x = cpu_array(np.zeros((4, 1, 64), np.int8))
    with pytest.raises(TypeError, match="q"):
        p.run(x, x, x)
