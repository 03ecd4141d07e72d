#include "alpha/autograd/functions.h"
#include "alpha/ops/elementwise.h"

namespace alpha::autograd {

Variable add(const Variable& a, const Variable& b) {
  return record("add", ops::add(a.value(), b.value()), {a, b}, [] {
    return BackwardFn([](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g, g}; });
  });
}

Variable mul(const Variable& a, const Variable& b) {
  return record("mul", ops::mul(a.value(), b.value()), {a, b}, [&] {
    Tensor av = a.value(), bv = b.value();
    return BackwardFn([av, bv](const Tensor& g, const std::vector<bool>& needs) {
      return std::vector<Tensor>{needs[0] ? ops::mul(g, bv) : Tensor(), needs[1] ? ops::mul(g, av) : Tensor()};
    });
  });
}

Variable scale(const Variable& x, double alpha) {
  return record("scale", ops::scale(x.value(), alpha), {x}, [alpha] {
    return BackwardFn([alpha](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{ops::scale(g, alpha)};
    });
  });
}

Variable sum(const Variable& x) {
  return record("sum", ops::sum(x.value()), {x}, [&] {
    Shape shape = x.shape();
    return BackwardFn([shape](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{Tensor::full(shape, g.item(), g.dtype(), g.device())};
    });
  });
}

}  // namespace alpha::autograd
