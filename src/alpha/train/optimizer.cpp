#include "alpha/train/optimizer.h"

#include <cmath>
#include <map>
#include <set>

#include "alpha/core/error.h"
#include "alpha/ops/optim.h"

namespace alpha::train {

namespace {

void require(bool ok, const char* field, const char* expected, double value) {
  if (!ok) raise<ConfigError>("AdamWOptions", field, expected, std::to_string(value));
}

}  // namespace

void AdamWOptions::validate() const {
  require(beta1 >= 0.0 && beta1 < 1.0, "beta1", "a value in [0, 1)", beta1);
  require(beta2 >= 0.0 && beta2 < 1.0, "beta2", "a value in [0, 1)", beta2);
  require(eps > 0.0 && std::isfinite(eps), "eps", "a finite value > 0", eps);
  require(weight_decay >= 0.0 && std::isfinite(weight_decay), "weight_decay", "a finite value >= 0", weight_decay);
}

AdamW::AdamW(std::vector<nn::NamedParameter> parameters, const AdamWOptions& options)
    : parameters_(std::move(parameters)), options_(options) {
  options_.validate();
  std::set<std::string> seen;
  for (const auto& p : parameters_) {
    if (!p.variable.defined() || !p.variable.is_leaf() || !p.variable.requires_grad())
      raise<ValueError>("AdamW", p.name, "a leaf variable that requires a gradient", "something else");
    if (!is_floating(p.variable.dtype()))
      raise<DTypeError>("AdamW", p.name, "a floating-point parameter", std::string(dtype_name(p.variable.dtype())));
    if (!seen.insert(p.name).second) raise<ValueError>("AdamW", p.name, "a unique parameter name", "a duplicate");
    const Tensor& value = p.variable.value();
    m_.push_back(Tensor::zeros(value.shape(), value.dtype(), value.device()));
    v_.push_back(Tensor::zeros(value.shape(), value.dtype(), value.device()));
  }
}

std::vector<Tensor> AdamW::gradients(const char* op) const {
  std::vector<Tensor> grads;
  grads.reserve(parameters_.size());
  for (const auto& p : parameters_) {
    if (!p.variable.grad().defined())
      raise<ValueError>(op, p.name, "a parameter with a gradient (run backward first)", "none");
    grads.push_back(p.variable.grad());
  }
  return grads;
}

void AdamW::step(double lr) { step_scaled("AdamW::step", lr, 1.0); }

void AdamW::require_settled(const char* op) const {
  if (queued_)
    raise<ValueError>(op, "self", "an optimiser with no queued step unsettled (call settle first)",
                      "step " + std::to_string(step_count_ + 1) + " queued");
}

void AdamW::step_scaled(const char* op, double lr, double grad_scale) {
  require_settled(op);
  update(op, lr, step_count_ + 1, grad_scale, Tensor());
  ++step_count_;
}

void AdamW::queued_step(double lr, const Tensor& factor) {
  prepare_step(lr);
  queue_update(factor);
}

void AdamW::prepare_step(double lr) {
  constexpr const char* op = "AdamW::prepare_step";
  require_settled(op);
  if (!(lr >= 0.0 && std::isfinite(lr))) raise<ValueError>(op, "lr", "a finite value >= 0", std::to_string(lr));
  if (!parameters_.empty()) {
    std::vector<Tensor> params;
    for (const auto& p : parameters_) params.push_back(p.variable.value());
    ops::write_adamw_step_terms(terms_, params, configs(lr, step_count_ + 1));
  }
  prepared_lr_ = lr;
  queued_ = true;
}

void AdamW::queue_update(const Tensor& factor) {
  constexpr const char* op = "AdamW::queue_update";
  if (!queued_) raise<ValueError>(op, "self", "a step prepared by prepare_step", "none prepared");
  if (!factor.defined()) raise<ValueError>(op, "factor", "a device factor (ops::step_guard's)", "an undefined tensor");
  update(op, prepared_lr_, step_count_ + 1, 1.0, factor);
}

std::vector<ops::AdamWConfig> AdamW::configs(double lr, int64_t step) const {
  std::vector<ops::AdamWConfig> out;
  for (const auto& p : parameters_)
    out.push_back({lr, options_.beta1, options_.beta2, options_.eps, p.decay ? options_.weight_decay : 0.0, step});
  return out;
}

void AdamW::settle(bool applied) {
  if (!queued_) raise<ValueError>("AdamW::settle", "self", "an optimiser with a queued step", "none queued");
  queued_ = false;
  if (applied) ++step_count_;
}

void AdamW::update(const char* op, double lr, int64_t step, double grad_scale, const Tensor& factor) {
  if (!(lr >= 0.0 && std::isfinite(lr))) raise<ValueError>(op, "lr", "a finite value >= 0", std::to_string(lr));
  std::vector<Tensor> grads = gradients(op);
  std::vector<Tensor> params, copies;
  std::vector<ops::AdamWConfig> configs = this->configs(lr, step);
  for (size_t k = 0; k < parameters_.size(); ++k) {
    autograd::Variable& variable = parameters_[k].variable;
    // A held compute copy (autograd::cast's bf16/f16 copy of an f32 parameter) is rewritten by the step
    // itself, in the same pass, and handed back below; mutable_value() drops it meanwhile.
    const Tensor& held = variable.compute_copy();
    const bool rewrite =
        held.defined() && ops::adamw_takes_compute_copy(variable.dtype(), grads[k].dtype(), held.dtype());
    copies.push_back(rewrite ? held : Tensor());
    params.push_back(variable.mutable_value());
    // A copy of another dtype than its parameter's is bf16 or f16 beside an f32 master: the one rounded.
    // (`held` is gone by now: mutable_value() dropped it; copies.back() holds it.)
    if (rewrite && options_.stochastic_rounding_seed && copies.back().dtype() != variable.dtype())
      configs[k].stochastic_rounding = ops::StochasticRounding{*options_.stochastic_rounding_seed, uint32_t(k), 0};
  }
  if (factor.defined())  // a queued step, its terms prepared
    ops::adamw_step(params, grads, m_, v_, copies, configs, factor, terms_);
  else
    ops::adamw_step(params, grads, m_, v_, copies, configs, grad_scale);
  for (size_t k = 0; k < parameters_.size(); ++k)
    if (copies[k].defined()) parameters_[k].variable.keep_compute_copy(copies[k]);
}

double AdamW::grad_norm() const { return grad_norm_tensor().item(); }

Tensor AdamW::grad_norm_tensor() const { return ops::global_grad_norm_tensor(gradients("AdamW::grad_norm")); }

ClipResult AdamW::clip_grad_norm(double max_norm) {
  if (!(max_norm > 0.0))
    raise<ValueError>("AdamW::clip_grad_norm", "max_norm", "a value > 0", std::to_string(max_norm));
  return clip_grad_norm(max_norm, ops::global_grad_norm(gradients("AdamW::clip_grad_norm")));
}

ClipResult AdamW::clip_grad_norm(double max_norm, double norm) {
  if (!(max_norm > 0.0))
    raise<ValueError>("AdamW::clip_grad_norm", "max_norm", "a value > 0", std::to_string(max_norm));
  return unscale_and_clip(1.0, max_norm, norm);
}

ClipResult AdamW::clip_of(const char* op, double loss_scale, double max_norm, double scaled_norm) {
  if (!(loss_scale >= 1.0) || !std::isfinite(loss_scale))
    raise<ValueError>(op, "loss_scale", "a finite value >= 1", std::to_string(loss_scale));
  const double norm = scaled_norm / loss_scale;
  return {norm, max_norm > 0.0 ? ops::clip_coefficient(max_norm, norm) : 1.0};
}

ClipResult AdamW::clip_result(double loss_scale, double max_norm, double scaled_norm) {
  return clip_of("AdamW::clip_result", loss_scale, max_norm, scaled_norm);
}

ClipResult AdamW::unscale_and_clip(double loss_scale, double max_norm, double scaled_norm) {
  constexpr const char* op = "AdamW::unscale_and_clip";
  const ClipResult clip = clip_of(op, loss_scale, max_norm, scaled_norm);
  std::vector<Tensor> grads = gradients(op);
  ops::scale_grads(grads, clip.clip_coef / loss_scale);
  return clip;
}

ClipResult AdamW::clipped_step(double lr, double loss_scale, double max_norm, double scaled_norm) {
  constexpr const char* op = "AdamW::clipped_step";
  const ClipResult clip = clip_of(op, loss_scale, max_norm, scaled_norm);
  step_scaled(op, lr, clip.clip_coef / loss_scale);
  return clip;
}

void AdamW::clear_grads() {
  for (auto& p : parameters_) p.variable.clear_grad();
}

std::vector<NamedTensor> AdamW::state_tensors() const {
  std::vector<NamedTensor> out;
  out.reserve(2 * parameters_.size());
  for (size_t i = 0; i < parameters_.size(); ++i) out.push_back({"m/" + parameters_[i].name, m_[i]});
  for (size_t i = 0; i < parameters_.size(); ++i) out.push_back({"v/" + parameters_[i].name, v_[i]});
  return out;
}

void AdamW::load_state(const std::vector<NamedTensor>& tensors, int64_t step_count) {
  constexpr const char* op = "AdamW::load_state";
  if (step_count < 0) raise<ValueError>(op, "step_count", "a value >= 0", std::to_string(step_count));
  std::map<std::string, const Tensor*> by_name;
  for (const auto& t : tensors)
    if (!by_name.emplace(t.name, &t.tensor).second)
      raise<ValueError>(op, t.name, "a unique tensor name", "a duplicate");
  // Validate everything before copying anything, so a failed load leaves the state untouched.
  std::vector<NamedTensor> expected = state_tensors();
  std::vector<const Tensor*> sources;
  for (const auto& e : expected) {
    auto it = by_name.find(e.name);
    if (it == by_name.end()) raise<ValueError>(op, e.name, "a tensor of that name in the state", "none");
    if (it->second->shape() != e.tensor.shape())
      raise<ShapeError>(op, e.name, "shape " + shape_str(e.tensor.shape()), shape_str(it->second->shape()));
    sources.push_back(it->second);
    by_name.erase(it);
  }
  if (!by_name.empty())
    raise<ValueError>(op, by_name.begin()->first,
                      "only the names m/<param> and v/<param> of this optimiser's parameters", "an unknown name");
  for (size_t i = 0; i < expected.size(); ++i) expected[i].tensor.copy_from(*sources[i]);
  step_count_ = step_count;
}

void keep_stochastic_compute_copies(const std::vector<nn::NamedParameter>& parameters, DType dtype, uint64_t seed,
                                    int64_t step) {
  if (step == 0) return;
  std::vector<Tensor> copies;
  for (const nn::NamedParameter& p : parameters)
    copies.push_back(Tensor::empty(p.variable.value().shape(), dtype, p.variable.value().device()));
  nn::keep_stochastic_compute_copies(parameters, copies, seed, step);
}

}  // namespace alpha::train
