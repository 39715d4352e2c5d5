// merge_states: validate, then the backend of the tensors' device.
#include "mlakit/merge.h"

#include "core/backend.h"
#include "plan/validate.h"

namespace mlakit {

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView* lse_out,
                  Stream stream) {
  plan::validate_merge_tensors(out_a, lse_a, out_b, lse_b, out, lse_out, /*allow_fp64=*/false);
  // The tensors exist on their device already, so no device check is needed here.
  const auto b = out_a.device.is_cpu() ? backend::make_cpu_backend()
                                       : backend::make_cuda_backend(out_a.device.index);
  b->merge(out_a, lse_a, out_b, lse_b, out, lse_out, stream);
}

}  // namespace mlakit
