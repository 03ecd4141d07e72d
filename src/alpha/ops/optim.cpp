#include "alpha/ops/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

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

// The gradient dtypes a param of dtype `param` takes: its own, and bf16 or f16 for an f32 master.
void check_grad_dtype(std::string_view op, std::string_view arg, const Tensor& grad, DType param) {
  check_defined(op, arg, grad);
  const DType g = grad.dtype();
  if (g == param || (param == DType::f32 && (g == DType::bf16 || g == DType::f16))) return;
  std::string expected = "dtype " + std::string(dtype_name(param));
  if (param == DType::f32) expected += " (or bf16 or f16: mixed precision with an f32 param)";
  raise<DTypeError>(op, arg, expected, std::string(dtype_name(g)));
}

// Calls fn.template operator()<G>() with the C++ type of the gradient's dtype for a param of type T.
template <class T, class Fn>
void visit_grad_type(DType grad, Fn&& fn) {
  if constexpr (std::is_same_v<T, float>) {
    switch (grad) {
      case DType::bf16: fn.template operator()<bf16>(); return;
      case DType::f16: fn.template operator()<f16>(); return;
      default: break;
    }
  }
  fn.template operator()<T>();
}

void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor* compute_copy,
           const AdamWConfig& config, double grad_scale) {
  constexpr std::string_view op = "adamw_step";
  check_backend_float(op, "param", param);
  check_contiguous(op, "param", param);
  check_same_device(op, "grad", grad, param);
  check_grad_dtype(op, "grad", grad, param.dtype());
  check_shape(op, "grad", grad, param.shape());
  for (auto [name, state] : {std::pair<const char*, const Tensor*>{"m", &m}, {"v", &v}}) {
    check_same_device(op, name, *state, param);
    check_same_dtype(op, name, *state, param);
    check_shape(op, name, *state, param.shape());
    check_contiguous(op, name, *state);
  }
  if (compute_copy) {
    check_same_device(op, "compute_copy", *compute_copy, param);
    check_same_dtype(op, "compute_copy", *compute_copy, grad);
    check_shape(op, "compute_copy", *compute_copy, param.shape());
    check_contiguous(op, "compute_copy", *compute_copy);
  }
  require(op, "lr", config.lr, non_negative(config.lr), "a finite value >= 0");
  require(op, "beta1", config.beta1, config.beta1 >= 0 && config.beta1 < 1, "a value in [0, 1)");
  require(op, "beta2", config.beta2, config.beta2 >= 0 && config.beta2 < 1, "a value in [0, 1)");
  require(op, "eps", config.eps, positive(config.eps), "a finite value > 0");
  require(op, "weight_decay", config.weight_decay, non_negative(config.weight_decay), "a finite value >= 0");
  require(op, "grad_scale", grad_scale, non_negative(grad_scale), "a finite value >= 0");
  require(op, "step", double(config.step), config.step >= 1, "a 1-based step (>= 1)");
  Tensor gc = grad.contiguous();
  dispatch_float(op, param, [&]<class T>(const auto& where) {
    using A = acc_t<T>;
    visit_grad_type<T>(grad.dtype(), [&]<class G>() {
      ALPHA_KERNEL(adamw_step)(where, kernels::AdamWArgs<T, G>{
          param.data<T>(), gc.data<G>(), m.data<T>(), v.data<T>(), A(config.lr), A(config.beta1), A(config.beta2),
          A(config.eps), A(config.weight_decay), A(grad_scale), config.step, param.numel(),
          compute_copy ? compute_copy->data<G>() : nullptr});
    });
  });
}

// A 0-d f64 tensor of the grads' device holding the norm (checked: on that device, f64, one element).
void check_norm_tensor(std::string_view op, const Tensor& norm, Device device) {
  check_defined(op, "norm", norm);
  check_dtype(op, "norm", norm, {DType::f64});
  if (norm.numel() != 1) raise<ShapeError>(op, "norm", "a single-element tensor", shape_str(norm.shape()));
  if (norm.device() != device) raise<DeviceError>(op, "norm", "a tensor on " + device.str(), norm.device().str());
}

// Checks that every grad can be scaled in place on grads[0]'s device, before any is.
void check_clip_grads(std::string_view op, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    check_backend_float(op, grad_name(i), grads[i]);
    check_same_device(op, grad_name(i), grads[i], grads[0]);
    check_contiguous(op, grad_name(i), grads[i]);
  }
}

}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& config,
                double grad_scale) {
  adamw(param, grad, m, v, nullptr, config, grad_scale);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& compute_copy,
                const AdamWConfig& config, double grad_scale) {
  adamw(param, grad, m, v, &compute_copy, config, grad_scale);
}

Tensor global_grad_norm_tensor(const std::vector<Tensor>& grads) {
  constexpr std::string_view op = "global_grad_norm";
  for (size_t i = 0; i < grads.size(); ++i) {
    check_backend_float(op, grad_name(i), grads[i]);
    check_same_device(op, grad_name(i), grads[i], grads[0]);
  }
  const Device device = grads.empty() ? Device::cpu() : grads[0].device();
  // One slot per tensor, written by that tensor's fixed-order kernel, then added in list order: deterministic.
  Tensor squares = Tensor::empty({int64_t(grads.size())}, DType::f64, device);
  for (size_t i = 0; i < grads.size(); ++i) {
    Tensor gc = grads[i].contiguous();
    dispatch_float(op, gc, [&]<class T>(const auto& where) {
      double* slot = squares.data<double>() + i;
      ALPHA_KERNEL(sum_squares)(where, kernels::SumSquaresArgs<T>{gc.data<T>(), slot, gc.numel()});
    });
  }
  Tensor norm = Tensor::empty({}, DType::f64, device);
  dispatch_device(op, device, [&](const auto& where) {
    ALPHA_KERNEL(grad_norm)(where, kernels::GradNormArgs{squares.data<double>(), squares.numel(), norm.data<double>()});
  });
  return norm;
}

double global_grad_norm(const std::vector<Tensor>& grads) {
  return global_grad_norm_tensor(grads).to(Device::cpu()).item();
}

double clip_coefficient(double max_norm, double norm) {
  constexpr std::string_view op = "clip_grad_norm";
  require(op, "max_norm", max_norm, positive(max_norm), "a finite value > 0");
  require(op, "norm", norm, non_negative(norm), "a finite norm >= 0");
  return std::min(1.0, max_norm / (norm + 1e-6));
}

namespace {

// scale_grads under the name of the op that asked for it (errors name that op).
void scale_grads_for(std::string_view op, std::vector<Tensor>& grads, double factor) {
  check_clip_grads(op, grads);
  if (factor == 1.0) return;
  for (Tensor& g : grads)
    dispatch_float(op, g, [&]<class T>(const auto& where) {
      ALPHA_KERNEL(scale)(where, kernels::ScaleArgs<T>{g.data<T>(), g.data<T>(), acc_t<T>(factor), g.numel()});
    });
}

}  // namespace

void scale_grads(std::vector<Tensor>& grads, double factor) { scale_grads_for("scale_grads", grads, factor); }

double clip_grad_norm(std::vector<Tensor>& grads, double max_norm, double norm) {
  const double coefficient = clip_coefficient(max_norm, norm);
  scale_grads_for("clip_grad_norm", grads, coefficient);
  return coefficient;
}

Tensor clip_grad_norm(std::vector<Tensor>& grads, double max_norm, const Tensor& norm) {
  constexpr std::string_view op = "clip_grad_norm";
  require(op, "max_norm", max_norm, positive(max_norm), "a finite value > 0");
  check_clip_grads(op, grads);
  const Device device = grads.empty() ? norm.device() : grads[0].device();
  check_norm_tensor(op, norm, device);
  Tensor coefficient = Tensor::empty({}, DType::f64, device);
  dispatch_device(op, device, [&](const auto& where) {
    ALPHA_KERNEL(clip_coefficient)(where, kernels::ClipCoefficientArgs{norm.data<double>(), max_norm,
                                                                      coefficient.data<double>()});
  });
  // Multiplying by a coefficient of 1 leaves every value's bits as they are, so the grads are scaled
  // unconditionally (the host overload skips that pass instead): the results are the same.
  for (Tensor& g : grads)
    dispatch_float(op, g, [&]<class T>(const auto& where) {
      ALPHA_KERNEL(scale_by)(where, kernels::ScaleByArgs<T>{g.data<T>(), coefficient.data<double>(), g.numel()});
    });
  return coefficient;
}

}  // namespace alpha::ops
