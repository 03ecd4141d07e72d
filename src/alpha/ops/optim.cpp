#include "alpha/ops/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "alpha/kernels/elementwise.h"
#include "alpha/kernels/optim.h"
#include "alpha/ops/check.h"

namespace alpha::ops {

namespace {

// Raises ValueError for a bad scalar argument, printing its value with %g (std::to_string would show 1e-9 as 0).
void require(std::string_view op, std::string_view arg, double value, bool ok, std::string_view expected) {
  if (ok) return;
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  raise<ValueError>(op, arg, expected, text);
}

bool non_negative(double x) { return std::isfinite(x) && x >= 0; }
bool positive(double x) { return std::isfinite(x) && x > 0; }

// How messages name the i-th gradient of a list.
std::string grad_name(size_t i) { return "grads[" + std::to_string(i) + "]"; }

}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& config,
                double grad_scale) {
  constexpr std::string_view op = "adamw_step";
  check_cpu_float(op, "param", param);
  check_contiguous(op, "param", param);
  for (auto [name, state] : {std::pair<const char*, const Tensor*>{"grad", &grad}, {"m", &m}, {"v", &v}}) {
    check_same_device(op, name, *state, param);
    check_same_dtype(op, name, *state, param);
    check_shape(op, name, *state, param.shape());
  }
  check_contiguous(op, "m", m);
  check_contiguous(op, "v", v);
  require(op, "lr", config.lr, non_negative(config.lr), "a finite value >= 0");
  require(op, "beta1", config.beta1, config.beta1 >= 0 && config.beta1 < 1, "a value in [0, 1)");
  require(op, "beta2", config.beta2, config.beta2 >= 0 && config.beta2 < 1, "a value in [0, 1)");
  require(op, "eps", config.eps, positive(config.eps), "a finite value > 0");
  require(op, "weight_decay", config.weight_decay, non_negative(config.weight_decay), "a finite value >= 0");
  require(op, "grad_scale", grad_scale, non_negative(grad_scale), "a finite value >= 0");
  require(op, "step", double(config.step), config.step >= 1, "a 1-based step (>= 1)");
  Tensor gc = grad.contiguous();
  dispatch_cpu_float(op, param, [&]<class T>() {
    using A = acc_t<T>;
    kernels::cpu::adamw_step(kernels::AdamWArgs<T>{param.data<T>(), gc.data<T>(), m.data<T>(), v.data<T>(),
                                                   A(config.lr), A(config.beta1), A(config.beta2), A(config.eps),
                                                   A(config.weight_decay), A(grad_scale), config.step,
                                                   param.numel()});
  });
}

double global_grad_norm(const std::vector<Tensor>& grads) {
  // Tensors are summed sequentially in list order, each with the fixed-order kernel: deterministic.
  double total = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    check_cpu_float("global_grad_norm", grad_name(i), grads[i]);
    Tensor gc = grads[i].contiguous();
    double squares = 0;
    dispatch_cpu_float("global_grad_norm", gc, [&]<class T>() {
      kernels::cpu::sum_squares(kernels::SumSquaresArgs<T>{gc.data<T>(), &squares, gc.numel()});
    });
    total += squares;
  }
  return std::sqrt(total);
}

double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, double norm) {
  constexpr std::string_view op = "clip_grad_norm";
  require(op, "max_norm", max_norm, positive(max_norm), "a finite value > 0");
  require(op, "norm", norm, non_negative(norm), "a finite norm >= 0");
  // Every grad is checked before any is scaled, so a bad list leaves all of them untouched.
  for (size_t i = 0; i < grads.size(); ++i) {
    check_cpu_float(op, grad_name(i), grads[i]);
    check_contiguous(op, grad_name(i), grads[i]);
  }
  double coefficient = std::min(1.0, max_norm / (norm + 1e-6));
  if (coefficient == 1.0) return coefficient;
  for (Tensor& g : grads)
    dispatch_cpu_float(op, g, [&]<class T>() {
      kernels::cpu::scale(kernels::ScaleArgs<T>{g.data<T>(), g.data<T>(), acc_t<T>(coefficient), g.numel()});
    });
  return coefficient;
}

}  // namespace alpha::ops
