// Latent attention behind the backend seam: a backend without a latent kernel refuses it when an
// object is created, naming config.device (the CPU and CUDA backends override both).
#include <string>

#include "core/backend.h"
#include "mlakit/error.h"

namespace mlakit {
namespace backend {

LatentChoice Backend::choose_latent(const LatentConfig&) const {
  throw Error(ErrorKind::kUnsupported, "config.device",
              "latent attention has no kernel for " + to_string(device()) +
                  "; run it on Device::cpu()");
}

void Backend::latent_attention(const latent::LatentArgs&, Stream) const {
  throw Error(ErrorKind::kUnsupported, "config.device",
              "latent attention has no kernel for " + to_string(device()));
}

}  // namespace backend
}  // namespace mlakit
