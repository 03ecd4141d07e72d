#include "alpha/autograd/functions.h"
#include "alpha/ops/matmul.h"

namespace alpha::autograd {

// C = op(A)·op(B). The gradients are again products of the stored operands with transpose flags, so
// nothing is transposed in memory: for a stored non-transposed A, dA = dC·op(B)ᵀ; for a stored Aᵀ,
// dAᵀ = op(B)·dCᵀ. Likewise dB = op(A)ᵀ·dC, or dBᵀ = dCᵀ·op(A).
Variable matmul(const Variable& a, const Variable& b, bool trans_a, bool trans_b) {
  return record("matmul", ops::matmul(a.value(), b.value(), trans_a, trans_b), {a, b}, [&] {
    Tensor av = a.value(), bv = b.value();
    return BackwardFn([av, bv, trans_a, trans_b](const Tensor& g, const std::vector<bool>& needs) {
      Tensor da, db;
      if (needs[0]) da = trans_a ? ops::matmul(bv, g, trans_b, true) : ops::matmul(g, bv, false, !trans_b);
      if (needs[1]) db = trans_b ? ops::matmul(g, av, true, trans_a) : ops::matmul(av, g, !trans_a, false);
      return std::vector<Tensor>{da, db};
    });
  });
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  Tensor bias_value = bias.defined() ? bias.value() : Tensor();
  return record("linear", ops::linear(x.value(), weight.value(), bias_value), {x, weight, bias}, [&] {
    Tensor xv = x.value(), wv = weight.value();
    return BackwardFn([xv, wv](const Tensor& g, const std::vector<bool>& needs) {
      ops::LinearGrads grads = ops::linear_backward(g, xv, wv, needs[0], needs[1], needs[2]);
      return std::vector<Tensor>{grads.dx, grads.dweight, grads.dbias};
    });
  });
}

}  // namespace alpha::autograd
