#include "alpha/ops/activation.h"

#include <string>

#include "alpha/kernels/activation.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

// Validates a float input x and runs launch.template operator()<T>(where, x contiguous, fresh output).
template <class Launch>
Tensor activation_forward(std::string_view op, const Tensor& x, Launch&& launch) {
  check_backend_float(op, "x", x);
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_float(op, x, [&]<class T>(const auto& where) { launch.template operator()<T>(where, xc, y); });
  return y;
}

// Validates dy against the saved forward tensor (named saved_arg) and runs
// launch.template operator()<T>(where, dy contiguous, saved contiguous, fresh dx).
template <class Launch>
Tensor activation_backward(std::string_view op, const Tensor& dy, const Tensor& saved, std::string_view saved_arg,
                Launch&& launch) {
  check_backend_float(op, saved_arg, saved);
  check_same_device(op, "dy", dy, saved);
  check_same_dtype(op, "dy", dy, saved);
  check_shape(op, "dy", dy, saved.shape());
  Tensor dyc = dy.contiguous(), sc = saved.contiguous();
  Tensor dx = Tensor::empty(saved.shape(), saved.dtype(), saved.device());
  dispatch_float(op, saved, [&]<class T>(const auto& where) { launch.template operator()<T>(where, dyc, sc, dx); });
  return dx;
}

void check_cap(std::string_view op, double cap) {
  if (!(cap > 0)) raise<ValueError>(op, "cap", "a positive value", std::to_string(cap));
}

int64_t last_dim(std::string_view op, std::string_view arg, const Tensor& t) {
  check_min_dim(op, arg, t, 1);
  return t.size(-1);
}

}  // namespace

Tensor gelu(const Tensor& x) {
  return activation_forward("gelu", x, [&]<class T>(const auto& where, const Tensor& xc, Tensor& y) {
    ALPHA_KERNEL(gelu)(where, kernels::GeluArgs<T>{xc.data<T>(), y.data<T>(), y.numel()});
  });
}

Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  return activation_backward("gelu_backward", dy, x, "x",
                             [&]<class T>(const auto& where, const Tensor& dyc, const Tensor& xc, Tensor& dx) {
    ALPHA_KERNEL(gelu_backward)(where,
                                kernels::GeluBackwardArgs<T>{dyc.data<T>(), xc.data<T>(), dx.data<T>(), dx.numel()});
  });
}

Tensor softcap(const Tensor& x, double cap) {
  check_cap("softcap", cap);
  return activation_forward("softcap", x, [&]<class T>(const auto& where, const Tensor& xc, Tensor& y) {
    ALPHA_KERNEL(softcap)(where, kernels::SoftcapArgs<T>{xc.data<T>(), y.data<T>(), acc_t<T>(cap), y.numel()});
  });
}

Tensor softcap_backward(const Tensor& dy, const Tensor& y, double cap) {
  check_cap("softcap_backward", cap);
  return activation_backward("softcap_backward", dy, y, "y",
                             [&]<class T>(const auto& where, const Tensor& dyc, const Tensor& yc, Tensor& dx) {
    ALPHA_KERNEL(softcap_backward)(
        where, kernels::SoftcapBackwardArgs<T>{dyc.data<T>(), yc.data<T>(), dx.data<T>(), acc_t<T>(cap), dx.numel()});
  });
}

Tensor softmax(const Tensor& x) {
  int64_t cols = last_dim("softmax", "x", x);
  return activation_forward("softmax", x, [&]<class T>(const auto& where, const Tensor& xc, Tensor& y) {
    int64_t rows = cols == 0 ? 0 : y.numel() / cols;
    ALPHA_KERNEL(softmax)(where, kernels::SoftmaxArgs<T>{xc.data<T>(), y.data<T>(), rows, cols});
  });
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  int64_t cols = last_dim("softmax_backward", "y", y);
  return activation_backward("softmax_backward", dy, y, "y",
                             [&]<class T>(const auto& where, const Tensor& dyc, const Tensor& yc, Tensor& dx) {
    int64_t rows = cols == 0 ? 0 : dx.numel() / cols;
    ALPHA_KERNEL(softmax_backward)(
        where, kernels::SoftmaxBackwardArgs<T>{dyc.data<T>(), yc.data<T>(), dx.data<T>(), rows, cols});
  });
}

}  // namespace alpha::ops
