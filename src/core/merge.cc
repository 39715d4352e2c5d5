// merge_states: validate, then the CPU backend for host tensors or the CUDA kernel.
#include "mlakit/merge.h"

#include "cpu/cpu_backend.h"
#include "cuda/prefill_launch.h"
#include "plan/validate.h"

namespace mlakit {

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView* lse_out,
                  Stream stream) {
  plan::validate_merge_tensors(out_a, lse_a, out_b, lse_b, out, lse_out, /*allow_fp64=*/false);
  if (out_a.device.is_cpu()) {
    cpu::merge_states(out_a, lse_a, out_b, lse_b, out, lse_out);
    return;
  }
  cuda::MergeArgs a{};
  a.out_a = out_a.data;
  a.lse_a = static_cast<const float*>(lse_a.data);
  a.out_b = out_b.data;
  a.lse_b = static_cast<const float*>(lse_b.data);
  a.out = out.data;
  a.lse_out = lse_out ? static_cast<float*>(lse_out->data) : nullptr;
  a.n = out_a.shape[0];
  a.h = out_a.shape[1];
  a.d = out_a.shape[2];
  a.oa_stride_tok = out_a.strides[0];
  a.oa_stride_head = out_a.strides[1];
  a.ob_stride_tok = out_b.strides[0];
  a.ob_stride_head = out_b.strides[1];
  a.o_stride_tok = out.strides[0];
  a.o_stride_head = out.strides[1];
  a.la_stride_tok = lse_a.strides[0];
  a.la_stride_head = lse_a.strides[1];
  a.lb_stride_tok = lse_b.strides[0];
  a.lb_stride_head = lse_b.strides[1];
  a.lo_stride_tok = lse_out ? lse_out->strides[0] : 0;
  a.lo_stride_head = lse_out ? lse_out->strides[1] : 0;
  cuda::launch_merge(out_a.dtype, a, stream);
}

}  // namespace mlakit
