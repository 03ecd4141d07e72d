#include "alpha/autograd/functions.h"
#include "alpha/ops/layernorm.h"

namespace alpha::autograd {

// Saves x, weight and the forward's per-row mean and rstd; bias needs nothing saved (dbias = Σ dy).
Variable layernorm(const Variable& x, const Variable& weight, const Variable& bias, double eps) {
  ops::LayerNormOutput out =
      ops::layernorm(x.value(), weight.value(), bias.defined() ? bias.value() : Tensor(), eps);
  return record("layernorm", out.y, {x, weight, bias}, [&] {
    Tensor xv = x.value(), wv = weight.value(), mean = out.mean, rstd = out.rstd;
    return BackwardFn([xv, wv, mean, rstd](const Tensor& g, const std::vector<bool>& needs) {
      ops::LayerNormGrads grads = ops::layernorm_backward(g, xv, wv, mean, rstd, needs[0], needs[1], needs[2]);
      return std::vector<Tensor>{grads.dx, grads.dweight, grads.dbias};
    });
  });
}

}  // namespace alpha::autograd
