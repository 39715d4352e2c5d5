// The CPU backend of latent attention (mlakit/latent.h): runs a published plan
// (contract/latent_layout.h) on host threads, every work item, then every split merge. The
// products take the path cpu_isa_in_use() names for the dtype (bf16: AVX-512 BF16 where
// present; fp16 and other CPUs: fp32). Callers validate first.
#pragma once

#include "contract/latent_launch.h"

namespace mlakit {
namespace cpu {

void run_latent(const latent::LatentArgs& args);

}  // namespace cpu
}  // namespace mlakit
