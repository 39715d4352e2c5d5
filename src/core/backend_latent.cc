// Latent attention behind the backend seam: backends without a latent kernel (today CUDA, whose
// Hopper kernel is to come) refuse it when an object is created, naming config.device.
#include <string>

#include "core/backend.h"
#include "mlakit/error.h"

namespace mlakit {
namespace backend {

LatentChoice Backend::choose_latent(const LatentConfig&) const {
  throw Error(ErrorKind::kUnsupported, "config.device",
              "latent attention has no kernel for " + to_string(device()) +
                  " yet (the Hopper kernel is to come); run it on Device::cpu()");
}

void Backend::latent_attention(const latent::LatentArgs&, Stream) const {
  throw Error(ErrorKind::kUnsupported, "config.device",
              "latent attention has no kernel for " + to_string(device()) + " yet");
}

}  // namespace backend
}  // namespace mlakit
