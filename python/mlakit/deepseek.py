"""The softmax scale of DeepSeek-V2/V3 attention, from the model's config.

DeepSeek's checkpoints with YaRN context extension (V2, V2-Lite, V3; ``rope_scaling`` with
``mscale_all_dim``) do not use the default ``qk_head_dim**-0.5``: the logits are scaled by
``qk_head_dim**-0.5 * mscale**2`` with ``mscale = 0.1 * mscale_all_dim * ln(factor) + 1`` (1 when
``factor <= 1``), as DeepSeek's and Hugging Face's attention compute it. The default scale gives
outputs 24-30% off on V2-Lite and V3. :class:`mlakit.MlaStep` and
:func:`mlakit.torch.flash_attn_varlen_func` take the scale as an argument; this derives it so no
engine has to.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["deepseek_softmax_scale", "yarn_mscale"]


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature for a context extended ``factor`` times:
    ``0.1 * mscale * ln(factor) + 1`` when ``factor > 1``, else 1."""
    if factor <= 1.0:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0


def _field(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def deepseek_softmax_scale(config: Any) -> float:
    """``sm_scale`` for a DeepSeek-V2/V3 model (MLA): ``qk_head_dim**-0.5``, times ``mscale**2``
    for YaRN checkpoints.

    ``config``: the model's Hugging Face config (``AutoConfig.from_pretrained(...)``) or its
    ``config.json`` as a dict. Read: ``qk_nope_head_dim`` + ``qk_rope_head_dim`` (or
    ``qk_head_dim``), and ``rope_scaling`` (``rope_parameters`` in newer transformers): when it
    is given, its ``rope_type`` / ``type`` is not ``"default"`` and it has a non-zero
    ``mscale_all_dim``, ``mscale = yarn_mscale(factor, mscale_all_dim)``. This is the rule of
    Hugging Face's ``DeepseekV3Attention`` and DeepSeek-V2's own modeling code.

        # DeepSeek-V3: 192**-0.5 * (1 + 0.1 * ln 40)**2 = 0.13524 (the default: 0.07217)
        deepseek_softmax_scale({"qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                                "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": 1.0}})
    """
    nope, rope = _field(config, "qk_nope_head_dim"), _field(config, "qk_rope_head_dim")
    if nope is not None and rope is not None:
        head_dim = int(nope) + int(rope)
    elif _field(config, "qk_head_dim") is not None:
        head_dim = int(_field(config, "qk_head_dim"))
    else:
        raise ValueError("mlakit: config: has neither qk_nope_head_dim + qk_rope_head_dim nor qk_head_dim "
                         "(a DeepSeek-V2/V3 config is expected)")
    if head_dim <= 0:
        raise ValueError(f"mlakit: config: the qk head dim must be > 0, got {head_dim}")
    scale = head_dim ** -0.5
    name = "rope_parameters" if _field(config, "rope_parameters") is not None else "rope_scaling"
    rope_scaling = _field(config, name)
    if rope_scaling is None:
        return scale
    if not isinstance(rope_scaling, Mapping):
        raise TypeError(f"mlakit: config.{name}: must be a dict or None, got {type(rope_scaling).__qualname__}")
    rope_type = rope_scaling.get("rope_type", rope_scaling.get("type"))
    mscale_all_dim = rope_scaling.get("mscale_all_dim") or 0.0
    if rope_type == "default" or not mscale_all_dim:
        return scale
    factor = rope_scaling.get("factor")
    if factor is None:
        raise ValueError(f"mlakit: config.{name}: has mscale_all_dim = {mscale_all_dim} but no factor")
    m = yarn_mscale(float(factor), float(mscale_all_dim))
    return scale * m * m
