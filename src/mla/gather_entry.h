// One entry of an MLA launch's gather map: where latent row r of the launch comes from.
//   entry >= 0: a cache slot. A context row, written by an earlier step; the gather copies it.
//   entry <  0: ~t, new token t of the step (row t of kv_c / k_pe). The gather copies it straight
//               from kv_c / k_pe and also writes it into the cache at the token's slot: this is
//               the step's cache write, fused into the first launch's gather.
// Slots are < 2^31 (check_config), so they never collide with ~t. The plan builder (host), the
// CPU ops and the CUDA gather kernel share these helpers, so they cannot disagree on the code.
#pragma once

#include <cstdint>

#include "contract/host_device.h"

namespace mlakit {
namespace mla {

MLAKIT_HD int32_t new_token_entry(int32_t token) { return ~token; }
MLAKIT_HD bool is_new_token_entry(int32_t entry) { return entry < 0; }
MLAKIT_HD int32_t new_token_of(int32_t entry) { return ~entry; }

}  // namespace mla
}  // namespace mlakit
