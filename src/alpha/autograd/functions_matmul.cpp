#include "alpha/autograd/compute_parameters.h"
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

// The residual's gradient is g itself (no pass over it), as residual_dropout_add's at p = 0.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias, const Variable& residual) {
  const LinearParameters p("linear", weight, bias, x.dtype());
  Tensor y = ops::linear(x.value(), p.weight.value, p.bias.value, residual.defined() ? residual.value() : Tensor());
  return record("linear", y, {x, weight, bias, residual}, [&] {
    return BackwardFn([xv = x.value(), p](const Tensor& g, const std::vector<bool>& needs) {
      ops::LinearGrads grads = ops::linear_backward(g, xv, p.weight.value, needs[0], p.weight_grad_in_compute(needs[1]),
                                                    p.bias_grad_in_compute(needs[2]));
      p.master_grads(g, xv, needs[1], needs[2], grads.dweight, grads.dbias);
      return std::vector<Tensor>{grads.dx, grads.dweight, grads.dbias, needs[3] ? g : Tensor()};
    });
  });
}

// Inputs x, fc_weight, fc_bias, proj_weight, proj_bias. The forward keeps pre (fc's pre-activation) and
// h = gelu(pre) only when recording; the backward runs proj's gradients and dpre = (dy·W_proj) ⊙ gelu'(pre)
// with Σ over rows of dpre as fc's bias gradient (for a master bias, that compute-dtype sum widened), then fc's
// input and weight gradients from dpre.
Variable gelu_mlp(const Variable& x, const Variable& fc_weight, const Variable& fc_bias, const Variable& proj_weight,
                  const Variable& proj_bias, const Variable& residual) {
  std::vector<Variable> inputs{x, fc_weight, fc_bias, proj_weight, proj_bias, residual};
  const LinearParameters fc_p("gelu_mlp", fc_weight, fc_bias, x.dtype()),
      proj_p("gelu_mlp", proj_weight, proj_bias, x.dtype());
  ops::LinearGelu fc = ops::linear_gelu(x.value(), fc_p.weight.value, fc_p.bias.value, needs_recording(inputs));
  Tensor y =
      ops::linear(fc.out, proj_p.weight.value, proj_p.bias.value, residual.defined() ? residual.value() : Tensor());
  return record("gelu_mlp", y, inputs, [&] {
    return BackwardFn(
        [xv = x.value(), fc_p, proj_p, pre = fc.pre, h = fc.out](const Tensor& g, const std::vector<bool>& needs) {
          std::vector<Tensor> grads = mlp_backward(g, xv, pre, h, fc_p, proj_p, needs);
          grads.push_back(needs[5] ? g : Tensor());  // the residual's
          return grads;
        });
  });
}

std::vector<Tensor> mlp_backward(const Tensor& g, const Tensor& x, const Tensor& pre, const Tensor& h,
                                 const LinearParameters& fc, const LinearParameters& proj,
                                 const std::vector<bool>& needs) {
  const bool need_dpre = needs[0] || needs[1];
  ops::GeluLinearGrads p =
      ops::gelu_linear_backward(g, pre, h, proj.weight.value, need_dpre, needs[2],
                                proj.weight_grad_in_compute(needs[3]), proj.bias_grad_in_compute(needs[4]));
  proj.master_grads(g, h, needs[3], needs[4], p.dweight, p.dbias);
  ops::LinearGrads fc_grads;
  if (need_dpre) {
    fc_grads = ops::linear_backward(p.dpre, x, fc.weight.value, needs[0], fc.weight_grad_in_compute(needs[1]), false);
    fc.master_grads(p.dpre, x, needs[1], false, fc_grads.dweight, fc_grads.dbias);
  }
  Tensor dfc_bias = p.dpre_bias.defined() ? p.dpre_bias.to(fc.bias.dtype) : Tensor();
  return {fc_grads.dx, fc_grads.dweight, dfc_bias, p.dweight, p.dbias};
}

}  // namespace alpha::autograd
