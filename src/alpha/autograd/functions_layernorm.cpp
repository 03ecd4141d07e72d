#include "alpha/autograd/compute_parameters.h"
#include "alpha/autograd/functions.h"
#include "alpha/ops/layernorm.h"

namespace alpha::autograd {

// Saves x, the parameters' compute values and the forward's per-row mean and rstd; bias needs nothing saved
// (dbias = Σ dy). Masters get the backward's f32 sums (compute_parameters.h). dx is added into x's gradient
// where backward offers it (gradient_accumulator: the residual stream's, in a pre-LN block).
Variable layernorm(const Variable& x, const Variable& weight, const Variable& bias, double eps) {
  const NormParameters p("layernorm", weight, bias, x.dtype());
  ops::LayerNormOutput out = ops::layernorm(x.value(), p.weight.value, p.bias.value, eps);
  return record("layernorm", out.y, {x, weight, bias}, [&] {
    return BackwardFn(
        [xv = x.value(), p, mean = out.mean, rstd = out.rstd](const Tensor& g, const std::vector<bool>& needs) {
          return p.grads(ops::layernorm_backward(g, xv, p.weight.value, mean, rstd, needs[0], needs[1], needs[2],
                                                 gradient_accumulator(0, xv)));
        });
  });
}

}  // namespace alpha::autograd
