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

// Inputs x, fc_weight, fc_bias, proj_weight, proj_bias. The forward keeps pre (fc's pre-activation) and
// h = gelu(pre) only when recording; the backward runs proj's gradients and dpre = (dy·W_proj) ⊙ gelu'(pre)
// with Σ over rows of dpre as fc's bias gradient, then fc's input and weight gradients from dpre.
Variable gelu_mlp(const Variable& x, const Variable& fc_weight, const Variable& fc_bias, const Variable& proj_weight,
                  const Variable& proj_bias) {
  std::vector<Variable> inputs{x, fc_weight, fc_bias, proj_weight, proj_bias};
  auto value = [](const Variable& v) { return v.defined() ? v.value() : Tensor(); };
  ops::LinearGelu fc = ops::linear_gelu(x.value(), fc_weight.value(), value(fc_bias), needs_recording(inputs));
  Tensor y = ops::linear(fc.out, proj_weight.value(), value(proj_bias));
  return record("gelu_mlp", y, inputs, [&] {
    Tensor xv = x.value(), w_fc = fc_weight.value(), pre = fc.pre, h = fc.out, w_proj = proj_weight.value();
    return BackwardFn([xv, w_fc, pre, h, w_proj](const Tensor& g, const std::vector<bool>& needs) {
      const bool need_dpre = needs[0] || needs[1];
      ops::GeluLinearGrads proj = ops::gelu_linear_backward(g, pre, h, w_proj, need_dpre, needs[2], needs[3], needs[4]);
      ops::LinearGrads fc_grads;
      if (need_dpre) fc_grads = ops::linear_backward(proj.dpre, xv, w_fc, needs[0], needs[1], false);
      return std::vector<Tensor>{fc_grads.dx, fc_grads.dweight, proj.dpre_bias, proj.dweight, proj.dbias};
    });
  });
}

}  // namespace alpha::autograd
