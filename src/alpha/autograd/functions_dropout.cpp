#include "alpha/autograd/functions.h"
#include "alpha/ops/dropout.h"

namespace alpha::autograd {

// Both backwards save only the config: the mask is regenerated from (seed, offset).

namespace {

// dropout's backward on g. At p = 0 (a model without dropout, whose blocks still add through
// residual_dropout_add) the mask keeps every element and scales by 1: g itself, with no kernel over it.
Tensor dropout_grad(const Tensor& g, const ops::DropoutConfig& config) {
  return config.p == 0.0 ? g : ops::dropout_backward(g, config);
}

}  // namespace

Variable dropout(const Variable& x, const ops::DropoutConfig& config) {
  return record("dropout", ops::dropout(x.value(), config), {x}, [config] {
    return BackwardFn(
        [config](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{dropout_grad(g, config)}; });
  });
}

Variable residual_dropout_add(const Variable& residual, const Variable& x, const ops::DropoutConfig& config) {
  return record("residual_dropout_add", ops::residual_dropout_add(residual.value(), x.value(), config), {residual, x},
                [config] {
                  return BackwardFn([config](const Tensor& g, const std::vector<bool>& needs) {
                    return std::vector<Tensor>{g, needs[1] ? dropout_grad(g, config) : Tensor()};
                  });
                });
}

}  // namespace alpha::autograd
