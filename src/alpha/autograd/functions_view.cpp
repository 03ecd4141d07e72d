#include "alpha/autograd/functions.h"

namespace alpha::autograd {

Variable reshape(const Variable& x, Shape shape) {
  return record("reshape", x.value().reshape(std::move(shape)), {x}, [&] {
    Shape in_shape = x.shape();
    return BackwardFn([in_shape](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{g.reshape(in_shape)};
    });
  });
}

Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end) {
  return record("slice", x.value().slice(dim, start, end), {x}, [&] {
    Shape in_shape = x.shape();
    DType dtype = x.dtype();
    Device device = x.value().device();
    return BackwardFn([=](const Tensor& g, const std::vector<bool>&) {
      Tensor full = Tensor::zeros(in_shape, dtype, device);
      full.slice(dim, start, end).copy_from(g);
      return std::vector<Tensor>{full};
    });
  });
}

Tensor cast_value(const Variable& x, DType dtype) {
  if (x.dtype() == dtype) return x.value();
  if (!x.is_leaf() || !x.requires_grad() || !x.holds_compute_copy()) return x.value().to(dtype);
  Variable parameter = x;  // a parameter: its held compute copy, or a conversion it then holds
  if (!x.compute_copy().defined() || x.compute_copy().dtype() != dtype)
    parameter.keep_compute_copy(x.value().to(dtype));
  return x.compute_copy();
}

Variable cast(const Variable& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return record("cast", cast_value(x, dtype), {x}, [&] {
    DType in_dtype = x.dtype();
    return BackwardFn([in_dtype](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g.to(in_dtype)}; });
  });
}

}  // namespace alpha::autograd
