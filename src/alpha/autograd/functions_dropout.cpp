#include "alpha/autograd/functions.h"
#include "alpha/ops/dropout.h"

namespace alpha::autograd {

// Both backwards save only the config: the mask is regenerated from (seed, offset).

Variable dropout(const Variable& x, const ops::DropoutConfig& config) {
  return record("dropout", ops::dropout(x.value(), config), {x}, [config] {
    return BackwardFn([config](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{ops::dropout_backward(g, config)};
    });
  });
}

Variable residual_dropout_add(const Variable& residual, const Variable& x, const ops::DropoutConfig& config) {
  return record(
      "residual_dropout_add", ops::residual_dropout_add(residual.value(), x.value(), config), {residual, x}, [config] {
        return BackwardFn([config](const Tensor& g, const std::vector<bool>& needs) {
          // At p = 0 (a model without dropout, whose blocks still add through this op) the mask keeps
          // every element and scales by 1: x's gradient is g itself, with no kernel over the tensor.
          const bool identity = config.p == 0.0;
          return std::vector<Tensor>{g, needs[1] ? (identity ? g : ops::dropout_backward(g, config)) : Tensor()};
        });
      });
}

}  // namespace alpha::autograd
