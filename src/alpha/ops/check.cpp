#include "alpha/ops/check.h"

#include <string>

namespace alpha::ops {

void check_defined(std::string_view op, std::string_view arg, const Tensor& t) {
  if (!t.defined()) raise<ValueError>(op, arg, "a defined tensor", "an undefined tensor");
}

void check_dtype(std::string_view op, std::string_view arg, const Tensor& t, std::initializer_list<DType> allowed) {
  check_defined(op, arg, t);
  std::string names;
  for (DType d : allowed) {
    if (d == t.dtype()) return;
    names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  raise<DTypeError>(op, arg, "dtype " + names, std::string(dtype_name(t.dtype())));
}

void check_same_dtype(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& reference) {
  check_defined(op, arg, t);
  if (t.dtype() != reference.dtype())
    raise<DTypeError>(op, arg, "dtype " + std::string(dtype_name(reference.dtype())),
                      std::string(dtype_name(t.dtype())));
}

void check_same_device(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& reference) {
  check_defined(op, arg, t);
  if (t.device() != reference.device())
    raise<DeviceError>(op, arg, "a tensor on " + reference.device().str(), t.device().str());
}

void check_contiguous(std::string_view op, std::string_view arg, const Tensor& t) {
  check_defined(op, arg, t);
  if (!t.is_contiguous())
    raise<LayoutError>(op, arg, "a contiguous tensor", "strides " + shape_str(t.strides()) + " for shape " +
                       shape_str(t.shape()));
}

void check_dim(std::string_view op, std::string_view arg, const Tensor& t, int64_t dims) {
  check_defined(op, arg, t);
  if (t.dim() != dims)
    raise<ShapeError>(op, arg, std::to_string(dims) + " dimensions", shape_str(t.shape()));
}

void check_min_dim(std::string_view op, std::string_view arg, const Tensor& t, int64_t dims) {
  check_defined(op, arg, t);
  if (t.dim() < dims)
    raise<ShapeError>(op, arg, "at least " + std::to_string(dims) + " dimensions", shape_str(t.shape()));
}

void check_shape(std::string_view op, std::string_view arg, const Tensor& t, const Shape& expected) {
  check_defined(op, arg, t);
  if (t.shape() != expected) raise<ShapeError>(op, arg, "shape " + shape_str(expected), shape_str(t.shape()));
}

void check_size(std::string_view op, std::string_view arg, const Tensor& t, int64_t dim, int64_t expected) {
  check_defined(op, arg, t);
  if (t.size(dim) != expected)
    raise<ShapeError>(op, arg, "size " + std::to_string(expected) + " in dimension " + std::to_string(dim),
                      shape_str(t.shape()));
}

void check_in_place(std::string_view op, std::string_view arg, const Tensor& t, const Shape& shape, DType dtype,
                    const Tensor& reference) {
  check_same_device(op, arg, t, reference);
  check_dtype(op, arg, t, {dtype});
  check_shape(op, arg, t, shape);
  check_contiguous(op, arg, t);
}

void check_cpu_float(std::string_view op, std::string_view arg, const Tensor& t) {
  check_defined(op, arg, t);
  if (!t.device().is_cpu())
    raise<DeviceError>(op, arg, "a CPU tensor (no " + t.device().str() + " kernel in this build)", t.device().str());
  check_dtype(op, arg, t, {DType::f32, DType::f64});
}

void check_backend_float(std::string_view op, std::string_view arg, const Tensor& t) {
  check_defined(op, arg, t);
  if (t.device().is_cpu()) check_dtype(op, arg, t, {DType::f32, DType::f64});
  else check_dtype(op, arg, t, {DType::f32, DType::bf16, DType::f16});
}

}  // namespace alpha::ops
