// Umbrella header.
#pragma once
#include "mlakit/error.h"
#include "mlakit/graph.h"
#include "mlakit/kv_cache.h"
#include "mlakit/latent.h"
#include "mlakit/merge.h"
#include "mlakit/mla.h"
#include "mlakit/prefill.h"
#include "mlakit/reference.h"
#include "mlakit/runtime.h"
#include "mlakit/tensor.h"
