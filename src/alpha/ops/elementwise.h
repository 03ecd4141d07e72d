// Element-wise tensor ops: same-shape, same-dtype, same-device operands; outputs are new contiguous tensors
// except add_ (in place).
#pragma once
#include "alpha/core/stream.h"
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double alpha);
// y += alpha * x, in place; y must be contiguous.
void add_(Tensor& y, const Tensor& x, double alpha = 1.0);
// Sum of all elements as a 0-dimensional tensor of x's dtype (deterministic reduction order).
Tensor sum(const Tensor& x);
// out = (rows[0] + rows[1] + ... ) * scale, the rows of a contiguous [k, n] tensor added in row order (as add_
// accumulates), into a contiguous [n] tensor of the same dtype and device that does not overlap them. On a GPU it
// is queued on `stream` when one is given (the data-parallel reduction passes its communicator's, so that the sum
// runs in the collectives' order); it allocates nothing.
void sum_rows(const Tensor& rows, Tensor& out, double scale, Stream stream = {});

}  // namespace alpha::ops
