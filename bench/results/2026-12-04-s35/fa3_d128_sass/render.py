# Renders FlashInfer's fa3 batch-prefill config and ragged kernel instantiation for bf16 (128, 128), causal,
# as its JIT (jit/attention/modules.py, backend "fa3") would, into the current folder.
import jinja2
import os
D=os.environ.get('FI_CSRC', '/tmp/fi/flashinfer/data/csrc/')
tn=["maybe_prefix_len_ptr","maybe_token_pos_in_items_ptr","maybe_max_item_len_ptr","maybe_scale_v"]
td=["uint32_t","uint16_t","uint16_t","float"]
sn=["logits_soft_cap","sm_scale","scale_v_scalar","token_pos_in_items_len"]
sd=["double","double","double","int64_t"]
decl="".join(f"{d}* {n};\n" for d,n in zip(td,tn))+"".join(f"{d} {n};\n" for d,n in zip(sd,sn))
kw=dict(variant_decl="#include<flashinfer/attention/hopper/variants.cuh>", variant_name="DefaultAttention<false>",
  dtype_q="nv_bfloat16", dtype_kv="nv_bfloat16", dtype_o="nv_bfloat16", idtype="int32_t", require_fp4_kv_cache=False,
  head_dim_qk=128, head_dim_vo=128, pos_encoding_mode="PosEncodingMode::kNone", use_sliding_window="false",
  use_logits_soft_cap="false", use_fp16_qk_reduction="false", paged_kv_stride_mode="runtime",
  same_kv_strides_values=["true","false"], additional_params_decl=decl, additional_func_params="", additional_params_setter="")
open('batch_prefill_sm90_config.inc','w').write(jinja2.Template(open(D+'batch_prefill_sm90_customize_config.jinja').read()).render(**kw))
open('ragged_causal.cu','w').write(jinja2.Template(open(D+'batch_prefill_ragged_sm90_kernel_inst.jinja').read()).render(mask_mode="MaskMode::kCausal",**kw))
