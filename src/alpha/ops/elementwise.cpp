#include "alpha/ops/elementwise.h"

#include "alpha/kernels/elementwise.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

template <template <class> class Kernel, class Launch>
Tensor binary(std::string_view op, const Tensor& a, const Tensor& b, Launch launch) {
  check_cpu_float(op, "a", a);
  check_same_device(op, "b", b, a);
  check_same_dtype(op, "b", b, a);
  check_shape(op, "b", b, a.shape());
  Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  dispatch_cpu_float(op, a, [&]<class T>() {
    launch(Kernel<T>{ac.data<T>(), bc.data<T>(), out.data<T>(), out.numel()});
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary<kernels::BinaryArgs>("add", a, b, [](const auto& args) { kernels::cpu::add(args); });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return binary<kernels::BinaryArgs>("mul", a, b, [](const auto& args) { kernels::cpu::mul(args); });
}

Tensor scale(const Tensor& x, double alpha) {
  check_cpu_float("scale", "x", x);
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_cpu_float("scale", x, [&]<class T>() {
    kernels::cpu::scale(kernels::ScaleArgs<T>{xc.data<T>(), out.data<T>(), acc_t<T>(alpha), out.numel()});
  });
  return out;
}

void add_(Tensor& y, const Tensor& x, double alpha) {
  check_cpu_float("add_", "y", y);
  check_contiguous("add_", "y", y);
  check_same_device("add_", "x", x, y);
  check_same_dtype("add_", "x", x, y);
  check_shape("add_", "x", x, y.shape());
  Tensor xc = x.contiguous();
  dispatch_cpu_float("add_", y, [&]<class T>() {
    kernels::cpu::axpy(kernels::AxpyArgs<T>{y.data<T>(), xc.data<T>(), acc_t<T>(alpha), y.numel()});
  });
}

Tensor sum(const Tensor& x) {
  check_cpu_float("sum", "x", x);
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  dispatch_cpu_float("sum", x, [&]<class T>() {
    acc_t<T> total = 0;
    kernels::cpu::sum(kernels::SumArgs<T>{xc.data<T>(), &total, xc.numel()});
    *out.data<T>() = T(total);
  });
  return out;
}

}  // namespace alpha::ops
