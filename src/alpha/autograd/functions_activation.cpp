#include "alpha/autograd/functions.h"
#include "alpha/ops/activation.h"

namespace alpha::autograd {

Variable gelu(const Variable& x) {
  return record("gelu", ops::gelu(x.value()), {x}, [&] {
    Tensor xv = x.value();
    return BackwardFn([xv](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{ops::gelu_backward(g, xv)};
    });
  });
}

// Softcap and softmax save their output, not their input: their derivatives are functions of y.
Variable softcap(const Variable& x, double cap) {
  Tensor y = ops::softcap(x.value(), cap);
  return record("softcap", y, {x}, [&] {
    return BackwardFn([y, cap](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{ops::softcap_backward(g, y, cap)};
    });
  });
}

Variable softmax(const Variable& x) {
  Tensor y = ops::softmax(x.value());
  return record("softmax", y, {x}, [&] {
    return BackwardFn([y](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{ops::softmax_backward(g, y)};
    });
  });
}

}  // namespace alpha::autograd
