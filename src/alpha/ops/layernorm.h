// Layer normalisation over the last dimension, one pass (Welford) per row.
#pragma once
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

struct LayerNormOutput {
  Tensor y;     // x's shape
  Tensor mean;  // [rows] in the accumulation dtype (f32, or f64 for f64 inputs)
  Tensor rstd;  // [rows], 1/sqrt(var + eps)
};
// x [..., C]; weight and bias [C] (bias may be undefined).
LayerNormOutput layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

// dx in x's dtype; dweight and dbias (sums over rows) in the accumulation dtype, as mean: a caller whose
// parameters are in x's dtype converts them, f32 master parameters under bf16/f16 take them as they are.
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
// With need_dx and a defined `add_dx_into` (x's shape, dtype and device, contiguous), dx is added into it, the sum
// rounded once, and grads.dx is that tensor.
LayerNormGrads layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, bool need_dx, bool need_dweight, bool need_dbias,
                                  const Tensor& add_dx_into = Tensor());

}  // namespace alpha::ops
