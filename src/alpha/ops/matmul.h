// Matrix products. No operand is ever transposed in memory: transposes are flags passed to the GEMM.
#pragma once
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// Batched matmul: a is [..., M, K] ([..., K, M] with trans_a), b is [..., K, N] ([..., N, K] with trans_b);
// leading (batch) dimensions must be equal; result [..., M, N]. f32 or f64; inputs need unit stride in
// their last dimension (any other strides are made contiguous).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// y = x · Wᵀ + b: x [..., in], weight [out, in], bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

struct LinearGrads {
  Tensor dx;       // [..., in], undefined unless requested
  Tensor dweight;  // [out, in]
  Tensor dbias;    // [out]
};
LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, bool need_dx,
                            bool need_dweight, bool need_dbias);

}  // namespace alpha::ops
