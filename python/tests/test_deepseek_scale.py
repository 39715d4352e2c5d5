"""mlakit.deepseek_softmax_scale: the softmax scale of DeepSeek-V2/V3 attention from the model's
config (a dict as in config.json, or a config object), against numbers worked by hand and against
Hugging Face's rule as DeepseekV3Attention states it (written out below)."""

import math
import types

import pytest

import mlakit

# The attention part of the published config.json files (DeepSeek-V2-Lite, DeepSeek-V3).
V2_LITE = {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "kv_lora_rank": 512,
           "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                            "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096, "type": "yarn"}}
V3 = {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "kv_lora_rank": 512,
      "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 4096, "type": "yarn"}}


def hf_rule(config):
    """Hugging Face's DeepseekV3Attention: scaling = qk_head_dim**-0.5; with rope_scaling given
    and a non-zero mscale_all_dim, times yarn_get_mscale(factor, mscale_all_dim)**2, where
    yarn_get_mscale is 1 for factor <= 1, else 0.1 * mscale * ln(factor) + 1."""
    scaling = (config["qk_nope_head_dim"] + config["qk_rope_head_dim"]) ** -0.5
    rs = config.get("rope_scaling")
    if rs is not None and rs.get("mscale_all_dim", 0):
        factor = rs["factor"]
        m = 1.0 if factor <= 1 else 0.1 * rs["mscale_all_dim"] * math.log(factor) + 1.0
        scaling = scaling * m * m
    return scaling


def test_hand_computed_values():
    # 192**-0.5 = 0.0721688; V3: (1 + 0.1 ln 40)^2 = 1.368888^2 = 1.873855; V2-Lite: mscale_all_dim 0.707.
    assert mlakit.deepseek_softmax_scale(V3) == pytest.approx(0.13523377886088, rel=1e-12)
    assert mlakit.deepseek_softmax_scale(V2_LITE) == pytest.approx(0.11472138679293, rel=1e-12)
    # The default scale these checkpoints must not get: 1.87x (V3) and 1.59x (V2-Lite) smaller.
    assert mlakit.deepseek_softmax_scale(V3) / 192 ** -0.5 == pytest.approx((1 + 0.1 * math.log(40)) ** 2)


@pytest.mark.parametrize("rope_scaling", [
    None,
    {"type": "yarn", "factor": 40, "mscale_all_dim": 1.0},
    {"rope_type": "yarn", "factor": 40, "mscale_all_dim": 0.707},
    {"type": "yarn", "factor": 16, "mscale_all_dim": 0.0},    # no mscale_all_dim: the default scale
    {"type": "yarn", "factor": 0.5, "mscale_all_dim": 1.0},   # factor <= 1: mscale 1
    {"type": "yarn", "factor": 4, "mscale": 1.0},             # mscale alone scales RoPE, not the logits
], ids=["none", "v3", "v2lite_rope_type", "no_mscale_all_dim", "factor_below_1", "mscale_only"])
@pytest.mark.parametrize("dims", [(128, 64), (64, 32)], ids=["192", "96"])
def test_matches_hugging_faces_rule(rope_scaling, dims):
    config = {"qk_nope_head_dim": dims[0], "qk_rope_head_dim": dims[1], "rope_scaling": rope_scaling}
    assert mlakit.deepseek_softmax_scale(config) == pytest.approx(hf_rule(config), rel=1e-15)


def test_config_objects_and_newer_transformers_names():
    # A config object (as AutoConfig returns: attributes, not keys), qk_head_dim alone, and
    # transformers' newer rope_parameters (where "default" means no scaling).
    obj = types.SimpleNamespace(**V3)
    assert mlakit.deepseek_softmax_scale(obj) == mlakit.deepseek_softmax_scale(V3)
    assert mlakit.deepseek_softmax_scale({"qk_head_dim": 192, "rope_scaling": V3["rope_scaling"]}) == \
        mlakit.deepseek_softmax_scale(V3)
    newer = {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
             "rope_parameters": {"rope_type": "yarn", "factor": 40, "mscale_all_dim": 1.0, "rope_theta": 10000.0}}
    assert mlakit.deepseek_softmax_scale(newer) == mlakit.deepseek_softmax_scale(V3)
    plain = dict(newer, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mscale_all_dim": 1.0})
    assert mlakit.deepseek_softmax_scale(plain) == 192 ** -0.5


def test_bad_configs_are_named():
    with pytest.raises(ValueError, match=r"^mlakit: config: has neither qk_nope_head_dim"):
        mlakit.deepseek_softmax_scale({"head_dim": 128})
    with pytest.raises(ValueError, match=r"^mlakit: config.rope_scaling: has mscale_all_dim = 1.0 but no factor"):
        mlakit.deepseek_softmax_scale({"qk_head_dim": 192, "rope_scaling": {"type": "yarn", "mscale_all_dim": 1.0}})
    with pytest.raises(TypeError, match=r"^mlakit: config.rope_scaling: must be a dict or None"):
        mlakit.deepseek_softmax_scale({"qk_head_dim": 192, "rope_scaling": "yarn"})


def test_the_scale_reaches_the_step():
    """The helper's value given to MlaStep.plan is the scale the step uses: against the step with
    the default scale, the LSE of a one-key row moves by exactly log-scale (q.k times the ratio)."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7)
    h, lora, nope, rope, dv = 2, 64, 128, 64, 128
    step = mlakit.MlaStep(h, lora, nope, rope, dv, dtype="fp16", num_blocks=2, max_batch=1, max_tokens=4)
    q = rng.standard_normal((1, h, nope + rope)).astype(np.float16)
    kv_c = rng.standard_normal((1, lora)).astype(np.float16)
    k_pe = rng.standard_normal((1, rope)).astype(np.float16)
    w = (rng.standard_normal((h * (nope + dv), lora)) / 8).astype(np.float16)
    cache = np.zeros((2, 16, lora + rope), np.float16)
    lses = []
    for scale in (None, mlakit.deepseek_softmax_scale(V3)):
        step.plan([1], [0], [[0]], sm_scale=scale)
        lses.append(step.run(q, kv_c, k_pe, w, cache.copy(), return_lse=True)[1])
    # One key: lse = scale * q.k, so the ratio of the two is the ratio of the scales.
    ratio = mlakit.deepseek_softmax_scale(V3) / 192 ** -0.5
    np.testing.assert_allclose(lses[1], lses[0] * ratio, rtol=1e-5)
