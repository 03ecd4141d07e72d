// Dropout with masks drawn from Philox keyed by (seed, offset + element index): the backward
// regenerates the forward's mask, and the CUDA kernels draw the same mask bit for bit. Every op runs on
// its tensors' device: f32 or f64 on the CPU, f32, bf16 or f16 on a CUDA device.
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
// The keep mask itself (u8, 1 = kept) on `device`, for tests and for checking one backend against another.
Tensor dropout_mask(const Shape& shape, const DropoutConfig& config, Device device = Device::cpu());

// out = residual + dropout(x), fused.
Tensor residual_dropout_add(const Tensor& residual, const Tensor& x, const DropoutConfig& config);
// Gradient w.r.t. residual is dout itself; w.r.t. x it is dropout_backward(dout).

}  // namespace alpha::ops
