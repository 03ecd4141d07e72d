// Dropout with masks drawn from Philox keyed by (seed, offset + element index): the backward
// regenerates the forward's mask, and a CUDA kernel draws the same mask bit for bit.
#pragma once
#include <cstdint>

#include "alpha/tensor/tensor.h"

namespace alpha::ops {

struct DropoutConfig {
  double p = 0.0;        // drop probability in [0, 1)
  uint64_t seed = 0;
  uint64_t offset = 0;   // element index of the first element in the Philox stream
};

// y = x · keep / (1 − p).
Tensor dropout(const Tensor& x, const DropoutConfig& config);
Tensor dropout_backward(const Tensor& dy, const DropoutConfig& config);
// The keep mask itself (u8, 1 = kept), for tests and for checking other backends.
Tensor dropout_mask(const Shape& shape, const DropoutConfig& config);

// out = residual + dropout(x), fused.
Tensor residual_dropout_add(const Tensor& residual, const Tensor& x, const DropoutConfig& config);
// Gradient w.r.t. residual is dout itself; w.r.t. x it is dropout_backward(dout).

}  // namespace alpha::ops
