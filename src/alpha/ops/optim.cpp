#include "alpha/ops/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

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

// The same for a field of a config named by a prefix ("configs[3]." in a list): the name is only put
// together for the error, so a passing check of a long list allocates nothing.
void require(std::string_view op, std::string_view prefix, std::string_view field, double value, bool ok,
             std::string_view expected) {
  if (!ok) require(op, std::string(prefix) + std::string(field), value, ok, expected);
}

bool non_negative(double x) { return std::isfinite(x) && x >= 0; }
bool positive(double x) { return std::isfinite(x) && x > 0; }

// How messages name the i-th gradient of a list.
std::string grad_name(size_t i) { return "grads[" + std::to_string(i) + "]"; }

// Whether `dtype` may stand beside a wider `wide`: wide itself, or bf16 or f16 beside f32 (the types
// visit_narrow_type visits). A gradient's dtype beside its param's, a compute copy's beside its gradient's.
bool is_narrow_dtype_of(DType dtype, DType wide) {
  return dtype == wide || (wide == DType::f32 && (dtype == DType::bf16 || dtype == DType::f16));
}

// The gradient dtypes a param of dtype `param` takes: its own, and bf16 or f16 for an f32 master.
void check_grad_dtype(std::string_view op, std::string_view arg, const Tensor& grad, DType param) {
  check_defined(op, arg, grad);
  const DType g = grad.dtype();
  if (is_narrow_dtype_of(g, param)) return;
  std::string expected = "dtype " + std::string(dtype_name(param));
  if (param == DType::f32) expected += " (or bf16 or f16: mixed precision with an f32 param)";
  raise<DTypeError>(op, arg, expected, std::string(dtype_name(g)));
}

// Calls fn.template operator()<N>() with the C++ type N of `dtype` (checked) beside a wider type T: bf16 or
// f16 beside an f32 T, else T itself. A gradient's type beside its param's, a compute copy's beside its
// gradient's.
template <class T, class Fn>
void visit_narrow_type(DType dtype, Fn&& fn) {
  if constexpr (std::is_same_v<T, float>) {
    switch (dtype) {
      case DType::bf16: fn.template operator()<bf16>(); return;
      case DType::f16: fn.template operator()<f16>(); return;
      default: break;
    }
  }
  fn.template operator()<T>();
}

// How errors name the tensors and scalars of one AdamW update: "param", "lr", ... for the single-tensor op;
// "params[k]", "configs[k].lr", ... for the k-th update of the list op.
struct AdamWNames {
  std::string param, grad, m, v, compute_copy, config;  // config: the prefix of the scalars' names
};

AdamWNames single_names() { return {"param", "grad", "m", "v", "compute_copy", ""}; }

// The names of the k-th update; compute_copies[k] only when it has a copy (its name is past the strings a
// short string holds without allocating, and the list op builds these for every tensor of every step).
AdamWNames list_names(size_t k, bool with_copies) {
  auto entry = [k](std::string_view list) { return std::string(list) + "[" + std::to_string(k) + "]"; };
  return {entry("params"), entry("grads"), entry("ms"),
          entry("vs"),     with_copies ? entry("compute_copies") : std::string(), entry("configs") + "."};
}

// A copy that stochastic rounding can write beside `param`: bf16 or f16 beside an f32 param.
void check_stochastic_copy(std::string_view op, std::string_view arg, const Tensor& param, const Tensor& copy) {
  if (param.dtype() != DType::f32 || (copy.dtype() != DType::bf16 && copy.dtype() != DType::f16))
    raise<DTypeError>(op, arg, "bf16 or f16 beside an f32 param (what stochastic rounding rounds to)",
                      std::string(dtype_name(copy.dtype())) + " beside " + std::string(dtype_name(param.dtype())));
}

// The kernels' rounding of a tensor at step `step` (>= 1).
kernels::StochasticRounding kernel_rounding(const StochasticRounding& r, int64_t step) {
  return {r.seed, kernels::stochastic_rounding_stream(r.tensor, step), uint64_t(r.offset)};
}

void check_adamw(std::string_view op, const AdamWNames& names, const Tensor& param, const Tensor& grad,
                 const Tensor& m, const Tensor& v, const Tensor* compute_copy, const AdamWConfig& config,
                 double grad_scale) {
  check_backend_float(op, names.param, param);
  check_contiguous(op, names.param, param);
  check_same_device(op, names.grad, grad, param);
  check_grad_dtype(op, names.grad, grad, param.dtype());
  check_shape(op, names.grad, grad, param.shape());
  for (auto [name, state] : {std::pair<const std::string*, const Tensor*>{&names.m, &m}, {&names.v, &v}})
    check_in_place(op, *name, *state, param.shape(), param.dtype(), param);
  if (compute_copy) {
    check_same_device(op, names.compute_copy, *compute_copy, param);
    // grad's dtype is checked against param's above, so an f32 grad means an f32 param.
    if (!is_narrow_dtype_of(compute_copy->dtype(), grad.dtype()))
      raise<DTypeError>(op, names.compute_copy,
                        "the grad's dtype " + std::string(dtype_name(grad.dtype())) +
                            " (or bf16 or f16 beside an f32 param and grad)",
                        std::string(dtype_name(compute_copy->dtype())));
    check_shape(op, names.compute_copy, *compute_copy, param.shape());
    check_contiguous(op, names.compute_copy, *compute_copy);
  }
  const std::string& c = names.config;
  if (config.stochastic_rounding) {
    if (!compute_copy)
      raise<ValueError>(op, c + "stochastic_rounding", "a compute copy to round (the overload with compute_copy)",
                        "no compute copy");
    check_stochastic_copy(op, names.compute_copy, param, *compute_copy);
    require(op, c, "stochastic_rounding.offset", double(config.stochastic_rounding->offset),
            config.stochastic_rounding->offset >= 0, "an element index >= 0");
  }
  require(op, c, "lr", config.lr, non_negative(config.lr), "a finite value >= 0");
  require(op, c, "beta1", config.beta1, config.beta1 >= 0 && config.beta1 < 1, "a value in [0, 1)");
  require(op, c, "beta2", config.beta2, config.beta2 >= 0 && config.beta2 < 1, "a value in [0, 1)");
  require(op, c, "eps", config.eps, positive(config.eps), "a finite value > 0");
  require(op, c, "weight_decay", config.weight_decay, non_negative(config.weight_decay), "a finite value >= 0");
  require(op, "grad_scale", grad_scale, non_negative(grad_scale), "a finite value >= 0");
  require(op, c, "step", double(config.step), config.step >= 1, "a 1-based step (>= 1)");
}

// The kernel's arguments for one checked update; grad is contiguous.
template <class T, class G, class C>
kernels::AdamWArgs<T, G, C> adamw_args(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor* compute_copy,
                                       const AdamWConfig& config, double grad_scale,
                                       const double* grad_scale_at = nullptr) {
  using A = acc_t<T>;
  kernels::AdamWArgs<T, G, C> args{param.data<T>(),  grad.data<G>(),         m.data<T>(),
                                   v.data<T>(),      A(config.lr),           A(config.beta1),
                                   A(config.beta2),  A(config.eps),          A(config.weight_decay),
                                   A(grad_scale),    config.step,            param.numel(),
                                   compute_copy ? compute_copy->data<C>() : nullptr};
  if (config.stochastic_rounding) {
    args.stochastic_rounding = true;
    args.rounding = kernel_rounding(*config.stochastic_rounding, config.step);
  }
  args.grad_scale_at = grad_scale_at;
  return args;
}

void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor* compute_copy, const AdamWConfig& config,
           double grad_scale) {
  constexpr std::string_view op = "adamw_step";
  check_adamw(op, single_names(), param, grad, m, v, compute_copy, config, grad_scale);
  Tensor gc = grad.contiguous();
  const DType copy_dtype = compute_copy ? compute_copy->dtype() : grad.dtype();
  dispatch_float(op, param, [&]<class T>(const auto& where) {
    visit_narrow_type<T>(grad.dtype(), [&]<class G>() {
      visit_narrow_type<G>(copy_dtype, [&]<class C>() {
        ALPHA_KERNEL(adamw_step)(where, adamw_args<T, G, C>(param, gc, m, v, compute_copy, config, grad_scale));
      });
    });
  });
}

// A list argument has one entry per param (ValueError otherwise).
void check_length(std::string_view op, std::string_view arg, size_t length, size_t params) {
  if (length != params)
    raise<ValueError>(op, arg, "a list of " + std::to_string(params) + " (one per param)", std::to_string(length));
}

// The indices 0 .. count-1 grouped by key(i), groups in order of first appearance and each in list order:
// the multi-tensor kernels take one element type, so a list takes one launch per group.
template <class Key>
std::vector<std::vector<size_t>> group_by(size_t count, Key key) {
  std::vector<decltype(key(size_t(0)))> keys;
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < count; ++i) {
    const auto it = std::find(keys.begin(), keys.end(), key(i));
    const size_t g = size_t(it - keys.begin());
    if (it == keys.end()) {
      keys.push_back(key(i));
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

// grad_scale_tensor (checked by the caller), when defined, holds the factor in place of grad_scale; terms (checked
// by the caller), when defined, row k the terms of params[k]'s update.
void adamw_list(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, std::vector<Tensor>* compute_copies, const std::vector<AdamWConfig>& configs,
                double grad_scale, const Tensor& grad_scale_tensor = Tensor(), const Tensor& terms = Tensor()) {
  constexpr std::string_view op = "adamw_step";
  check_length(op, "grads", grads.size(), params.size());
  check_length(op, "ms", ms.size(), params.size());
  check_length(op, "vs", vs.size(), params.size());
  if (compute_copies) check_length(op, "compute_copies", compute_copies->size(), params.size());
  check_length(op, "configs", configs.size(), params.size());
  // An undefined entry of compute_copies: that param has no copy.
  auto copy_of = [&](size_t k) {
    return compute_copies && (*compute_copies)[k].defined() ? &(*compute_copies)[k] : nullptr;
  };
  for (size_t k = 0; k < params.size(); ++k) {
    const AdamWNames names = list_names(k, copy_of(k) != nullptr);
    check_same_device(op, names.param, params[k], params[0]);
    check_adamw(op, names, params[k], grads[k], ms[k], vs[k], copy_of(k), configs[k], grad_scale);
  }
  std::vector<Tensor> contiguous_grads;
  for (const Tensor& g : grads) contiguous_grads.push_back(g.contiguous());
  // One launch per (param, grad, copy) dtype triple; a param without a copy groups with its grad's dtype.
  auto copy_dtype = [&](size_t k) { return copy_of(k) ? copy_of(k)->dtype() : grads[k].dtype(); };
  auto dtypes = [&](size_t k) { return std::tuple(params[k].dtype(), grads[k].dtype(), copy_dtype(k)); };
  for (const std::vector<size_t>& group : group_by(params.size(), dtypes))
    dispatch_float(op, params[group[0]], [&]<class T>(const auto& where) {
      visit_narrow_type<T>(grads[group[0]].dtype(), [&]<class G>() {
        visit_narrow_type<G>(copy_dtype(group[0]), [&]<class C>() {
          std::vector<kernels::AdamWArgs<T, G, C>> list;
          for (size_t k : group) {
            list.push_back(
                adamw_args<T, G, C>(params[k], contiguous_grads[k], ms[k], vs[k], copy_of(k), configs[k], grad_scale,
                                    grad_scale_tensor.defined() ? grad_scale_tensor.data<double>() : nullptr));
            if (terms.defined()) list.back().terms_at = terms.data<double>() + kernels::kAdamWTerms * k;
          }
          ALPHA_KERNEL(multi_adamw_step)(where, std::span<const kernels::AdamWArgs<T, G, C>>(list));
        });
      });
    });
}

// Calls fn.template operator()<T>(where, group) once per dtype among `tensors` (checked: float tensors of
// one device), with the indices of the tensors of that dtype: one multi-tensor launch each.
template <class Fn>
void dispatch_dtype_groups(std::string_view op, const std::vector<Tensor>& tensors, Fn&& fn) {
  for (const std::vector<size_t>& group : group_by(tensors.size(), [&](size_t i) { return tensors[i].dtype(); }))
    dispatch_float(op, tensors[group[0]], [&]<class T>(const auto& where) { fn.template operator()<T>(where, group); });
}

// A 0-d f64 tensor of the grads' device holding the norm (checked: on that device, f64, one element).
// A single-element f64 tensor on `device` (a norm, a factor).
void check_f64_scalar(std::string_view op, std::string_view arg, const Tensor& t, Device device) {
  check_defined(op, arg, t);
  check_dtype(op, arg, t, {DType::f64});
  if (t.numel() != 1) raise<ShapeError>(op, arg, "a single-element tensor", shape_str(t.shape()));
  if (t.device() != device) raise<DeviceError>(op, arg, "a tensor on " + device.str(), t.device().str());
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

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, const std::vector<AdamWConfig>& configs, double grad_scale) {
  adamw_list(params, grads, ms, vs, nullptr, configs, grad_scale);
}

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, std::vector<Tensor>& compute_copies, const std::vector<AdamWConfig>& configs,
                double grad_scale) {
  adamw_list(params, grads, ms, vs, &compute_copies, configs, grad_scale);
}

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, std::vector<Tensor>& compute_copies, const std::vector<AdamWConfig>& configs,
                const Tensor& grad_scale) {
  if (!params.empty()) check_f64_scalar("adamw_step", "grad_scale", grad_scale, params[0].device());
  adamw_list(params, grads, ms, vs, &compute_copies, configs, 1.0, grad_scale);
}

void adamw_step(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& ms,
                std::vector<Tensor>& vs, std::vector<Tensor>& compute_copies, const std::vector<AdamWConfig>& configs,
                const Tensor& grad_scale, const Tensor& terms) {
  constexpr std::string_view op = "adamw_step";
  if (!params.empty()) {
    check_f64_scalar(op, "grad_scale", grad_scale, params[0].device());
    check_defined(op, "terms", terms);
    check_dtype(op, "terms", terms, {DType::f64});
    check_shape(op, "terms", terms, {int64_t(params.size()), kernels::kAdamWTerms});
    check_contiguous(op, "terms", terms);
    if (terms.device() != params[0].device())
      raise<DeviceError>(op, "terms", "a tensor on " + params[0].device().str(), terms.device().str());
  }
  adamw_list(params, grads, ms, vs, &compute_copies, configs, 1.0, grad_scale, terms);
}

Tensor adamw_step_terms(const std::vector<Tensor>& params, const std::vector<AdamWConfig>& configs) {
  constexpr std::string_view op = "adamw_step_terms";
  check_length(op, "configs", configs.size(), params.size());
  std::vector<double> terms;
  for (size_t k = 0; k < params.size(); ++k) {
    check_defined(op, "params[" + std::to_string(k) + "]", params[k]);
    const AdamWConfig& c = configs[k];
    // The accumulation type: double for an f64 param, float for every other (acc_t).
    auto append = [&]<class A>() {
      const kernels::AdamWStepTerms<A> t =
          kernels::adamw_step_terms<A>(A(c.lr), A(c.beta1), A(c.beta2), A(c.weight_decay), c.step);
      terms.insert(terms.end(),
                   {double(t.step_size), double(t.inv_sqrt_bias_correction2), double(t.decay), double(c.step)});
    };
    if (params[k].dtype() == DType::f64) append.template operator()<double>();
    else append.template operator()<float>();
  }
  return Tensor::from_vector(terms, {int64_t(params.size()), kernels::kAdamWTerms});
}

void write_adamw_step_terms(Tensor& terms, const std::vector<Tensor>& params, const std::vector<AdamWConfig>& configs) {
  const Tensor host = adamw_step_terms(params, configs);
  if (!terms.defined() || terms.shape() != host.shape())
    terms = Tensor::empty(host.shape(), DType::f64, params.empty() ? Device::cpu() : params[0].device());
  terms.copy_from(host);
}

Tensor step_guard(const Tensor& scaled_norm, const Tensor& losses, double loss_scale, double max_norm) {
  constexpr std::string_view op = "step_guard";
  check_defined(op, "scaled_norm", scaled_norm);
  const Device device = scaled_norm.device();
  check_f64_scalar(op, "scaled_norm", scaled_norm, device);
  check_defined(op, "losses", losses);
  check_dtype(op, "losses", losses, {DType::f32, DType::f64});
  if (losses.dim() != 1) raise<ShapeError>(op, "losses", "one dimension (k)", shape_str(losses.shape()));
  if (losses.device() != device) raise<DeviceError>(op, "losses", "a tensor on " + device.str(), losses.device().str());
  require(op, "loss_scale", loss_scale, loss_scale >= 1.0 && std::isfinite(loss_scale), "a finite value >= 1");
  require(op, "max_norm", max_norm, non_negative(max_norm), "a finite value >= 0 (0: no clipping)");
  const Tensor norm = scaled_norm.contiguous(), values = losses.contiguous();
  Tensor factor = Tensor::empty({}, DType::f64, device);
  auto guard = [&]<class L>() {
    const kernels::StepGuardArgs<L> args{norm.data<double>(), values.data<L>(), values.numel(),
                                         loss_scale,          max_norm,         factor.data<double>()};
    dispatch_device(op, device, [&](const auto& where) { ALPHA_KERNEL(step_guard)(where, args); });
  };
  if (values.dtype() == DType::f32)
    guard.template operator()<float>();
  else
    guard.template operator()<double>();
  return factor;
}

namespace {

// The sums of squares of global_grad_norm under the name of the op that asked for them.
Tensor sums_of_squares_for(std::string_view op, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    check_backend_float(op, grad_name(i), grads[i]);
    check_same_device(op, grad_name(i), grads[i], grads[0]);
  }
  const Device device = grads.empty() ? Device::cpu() : grads[0].device();
  // One slot per tensor, written by that tensor's fixed-order sum: deterministic.
  Tensor squares = Tensor::empty({int64_t(grads.size())}, DType::f64, device);
  std::vector<Tensor> contiguous;
  for (const Tensor& g : grads) contiguous.push_back(g.contiguous());
  dispatch_dtype_groups(op, contiguous, [&]<class T>(const auto& where, const std::vector<size_t>& group) {
    std::vector<kernels::SumSquaresArgs<T>> list;
    for (size_t i : group)
      list.push_back({contiguous[i].data<T>(), squares.data<double>() + i, contiguous[i].numel()});
    ALPHA_KERNEL(multi_sum_squares)(where, std::span<const kernels::SumSquaresArgs<T>>(list));
  });
  return squares;
}

}  // namespace

Tensor sums_of_squares(const std::vector<Tensor>& grads) { return sums_of_squares_for("sums_of_squares", grads); }

Tensor norm_of_sums_of_squares(const Tensor& squares) {
  constexpr std::string_view op = "norm_of_sums_of_squares";
  if (squares.dtype() != DType::f64 || squares.dim() != 1 || !squares.is_contiguous())
    raise<ValueError>(op, "squares", "a contiguous 1-D f64 tensor (sums_of_squares')",
                      std::string(dtype_name(squares.dtype())) + " " + shape_str(squares.shape()));
  Tensor norm = Tensor::empty({}, DType::f64, squares.device());
  dispatch_device(op, squares.device(), [&](const auto& where) {
    ALPHA_KERNEL(grad_norm)(where, kernels::GradNormArgs{squares.data<double>(), squares.numel(), norm.data<double>()});
  });
  return norm;
}

Tensor global_grad_norm_tensor(const std::vector<Tensor>& grads) {
  // The slots added in list order: deterministic.
  return norm_of_sums_of_squares(sums_of_squares_for("global_grad_norm", grads));
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
  dispatch_dtype_groups(op, grads, [&]<class T>(const auto& where, const std::vector<size_t>& group) {
    std::vector<kernels::ScaleArgs<T>> list;
    for (size_t i : group) list.push_back({grads[i].data<T>(), grads[i].data<T>(), acc_t<T>(factor), grads[i].numel()});
    ALPHA_KERNEL(multi_scale)(where, std::span<const kernels::ScaleArgs<T>>(list));
  });
}

// grads[i] *= *factor (f64, on the grads' device), under the name of the op that asked for it.
void scale_grads_by_tensor_for(std::string_view op, std::vector<Tensor>& grads, const Tensor& factor) {
  dispatch_dtype_groups(op, grads, [&]<class T>(const auto& where, const std::vector<size_t>& group) {
    std::vector<kernels::ScaleByArgs<T>> list;
    for (size_t i : group) list.push_back({grads[i].data<T>(), factor.data<double>(), grads[i].numel()});
    ALPHA_KERNEL(multi_scale_by)(where, std::span<const kernels::ScaleByArgs<T>>(list));
  });
}

}  // namespace

void stochastic_round(const std::vector<Tensor>& params, std::vector<Tensor>& copies, int64_t step,
                      const std::vector<StochasticRounding>& roundings) {
  constexpr std::string_view op = "stochastic_round";
  check_length(op, "copies", copies.size(), params.size());
  check_length(op, "roundings", roundings.size(), params.size());
  require(op, "step", double(step), step >= 1, "a 1-based step (>= 1)");
  auto entry = [](std::string_view list, size_t k) { return std::string(list) + "[" + std::to_string(k) + "]"; };
  std::vector<size_t> rounded;  // the entries with a copy
  for (size_t k = 0; k < params.size(); ++k) {
    if (!copies[k].defined()) continue;
    rounded.push_back(k);
    check_backend_float(op, entry("params", k), params[k]);
    check_contiguous(op, entry("params", k), params[k]);
    check_same_device(op, entry("params", k), params[k], params[rounded[0]]);
    check_same_device(op, entry("copies", k), copies[k], params[k]);
    check_stochastic_copy(op, entry("copies", k), params[k], copies[k]);
    check_shape(op, entry("copies", k), copies[k], params[k].shape());
    check_contiguous(op, entry("copies", k), copies[k]);
    require(op, entry("roundings", k), ".offset", double(roundings[k].offset), roundings[k].offset >= 0,
            "an element index >= 0");
  }
  // One launch per copy dtype; the params are f32 (checked), so only C = bf16 or f16 beside T = float runs.
  auto copy_dtype = [&](size_t i) { return copies[rounded[i]].dtype(); };
  for (const std::vector<size_t>& group : group_by(rounded.size(), copy_dtype))
    dispatch_float(op, params[rounded[group[0]]], [&]<class T>(const auto& where) {
      visit_narrow_type<T>(copy_dtype(group[0]), [&]<class C>() {
        if constexpr (std::is_same_v<T, float> && !std::is_same_v<C, float>) {
          std::vector<kernels::StochasticRoundArgs<C>> list;
          for (size_t i : group) {
            const size_t k = rounded[i];
            list.push_back({params[k].data<float>(), copies[k].data<C>(), params[k].numel(),
                            kernel_rounding(roundings[k], step)});
          }
          ALPHA_KERNEL(multi_stochastic_round)(where, std::span<const kernels::StochasticRoundArgs<C>>(list));
        }
      });
    });
}

bool adamw_takes_compute_copy(DType param, DType grad, DType copy) {
  return is_narrow_dtype_of(grad, param) && is_narrow_dtype_of(copy, grad);
}

void scale_grads(std::vector<Tensor>& grads, double factor) { scale_grads_for("scale_grads", grads, factor); }

void scale_grads(std::vector<Tensor>& grads, const Tensor& factor) {
  constexpr std::string_view op = "scale_grads";
  check_clip_grads(op, grads);
  if (grads.empty()) return;
  check_f64_scalar(op, "factor", factor, grads[0].device());
  scale_grads_by_tensor_for(op, grads, factor);
}

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
  check_f64_scalar(op, "norm", norm, device);
  Tensor coefficient = Tensor::empty({}, DType::f64, device);
  dispatch_device(op, device, [&](const auto& where) {
    ALPHA_KERNEL(clip_coefficient)(where, kernels::ClipCoefficientArgs{norm.data<double>(), max_norm,
                                                                      coefficient.data<double>()});
  });
  // Multiplying by a coefficient of 1 leaves every value's bits as they are, so the grads are scaled
  // unconditionally (the host overload skips that pass instead): the results are the same.
  scale_grads_by_tensor_for(op, grads, coefficient);
  return coefficient;
}

}  // namespace alpha::ops
