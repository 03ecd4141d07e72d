// Element-wise tensor ops: same-shape, same-dtype, same-device operands; outputs are new contiguous tensors
// except add_ (in place).
#pragma once
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double alpha);
// y += alpha * x, in place; y must be contiguous.
void add_(Tensor& y, const Tensor& x, double alpha = 1.0);
// Sum of all elements as a 0-dimensional tensor of x's dtype (deterministic reduction order).
Tensor sum(const Tensor& x);

}  // namespace alpha::ops
