#include "alpha/ops/elementwise.h"

#include "alpha/kernels/elementwise.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

template <class Kernel>
Tensor binary(std::string_view op, const Tensor& a, const Tensor& b, Kernel kernel) {
  check_backend_float(op, "a", a);
  check_same_device(op, "b", b, a);
  check_same_dtype(op, "b", b, a);
  check_shape(op, "b", b, a.shape());
  Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  dispatch_float(op, a, [&]<class T>(const auto& where) {
    kernel(where, kernels::BinaryArgs<T>{ac.data<T>(), bc.data<T>(), out.data<T>(), out.numel()});
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", a, b, ALPHA_KERNEL(add)); }

Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", a, b, ALPHA_KERNEL(mul)); }

Tensor scale(const Tensor& x, double alpha) {
  check_backend_float("scale", "x", x);
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_float("scale", x, [&]<class T>(const auto& where) {
    ALPHA_KERNEL(scale)(where, kernels::ScaleArgs<T>{xc.data<T>(), out.data<T>(), acc_t<T>(alpha), out.numel()});
  });
  return out;
}

void add_(Tensor& y, const Tensor& x, double alpha) {
  check_backend_float("add_", "y", y);
  check_contiguous("add_", "y", y);
  check_same_device("add_", "x", x, y);
  check_same_dtype("add_", "x", x, y);
  check_shape("add_", "x", x, y.shape());
  Tensor xc = x.contiguous();
  dispatch_float("add_", y, [&]<class T>(const auto& where) {
    ALPHA_KERNEL(axpy)(where, kernels::AxpyArgs<T>{y.data<T>(), xc.data<T>(), acc_t<T>(alpha), y.numel()});
  });
}

Tensor sum(const Tensor& x) {
  check_backend_float("sum", "x", x);
  Tensor xc = x.contiguous();
  // The kernel writes its accumulator (f64 for f64, f32 otherwise) on x's device; the result takes x's dtype.
  Tensor total = Tensor::empty({}, accumulation_dtype(x.dtype()), x.device());
  dispatch_float("sum", x, [&]<class T>(const auto& where) {
    ALPHA_KERNEL(sum)(where, kernels::SumArgs<T>{xc.data<T>(), total.data<acc_t<T>>(), xc.numel()});
  });
  return total.to(x.dtype());
}

void sum_rows(const Tensor& rows, Tensor& out, double scale, Stream stream) {
  constexpr std::string_view op = "sum_rows";
  check_backend_float(op, "rows", rows);
  check_dim(op, "rows", rows, 2);
  check_contiguous(op, "rows", rows);
  check_in_place(op, "out", out, {rows.size(1)}, rows.dtype(), rows);
  const auto* rows_begin = static_cast<const char*>(rows.raw_data());
  const auto* out_begin = static_cast<const char*>(out.raw_data());
  const size_t element = dtype_size(rows.dtype());
  if (out_begin < rows_begin + size_t(rows.numel()) * element && rows_begin < out_begin + size_t(out.numel()) * element)
    raise<ValueError>(op, "out", "a tensor not overlapping rows", "one sharing memory with rows");
  dispatch_float(
      op, rows,
      [&]<class T>(const auto& where) {
        ALPHA_KERNEL(sum_rows)
        (where, kernels::SumRowsArgs<T>{rows.data<T>(), out.data<T>(), rows.size(0), rows.size(1), acc_t<T>(scale)});
      },
      stream);
}

}  // namespace alpha::ops
