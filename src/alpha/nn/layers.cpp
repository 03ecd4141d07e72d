#include "alpha/nn/layers.h"

#include "alpha/autograd/functions.h"

namespace alpha::nn {

namespace {

Tensor normal_init(const std::string& name, Shape shape, double stddev, const ParameterOptions& o) {
  return Tensor::normal(std::move(shape), 0.0, stddev, parameter_seed(o.seed, name), o.dtype, o.device);
}

}  // namespace

autograd::Variable ParameterOptions::for_compute(const autograd::Variable& parameter) const {
  return autograd::cast(parameter, compute());
}

Linear::Linear(std::string prefix, int64_t in_features, int64_t out_features, bool bias, double init_std,
               const ParameterOptions& options)
    : Module(std::move(prefix)), options_(options) {
  weight_ =
      &add_parameter("weight", normal_init(child_prefix("weight"), {out_features, in_features}, init_std, options),
                     /*decay=*/true);
  if (bias) bias_ = &add_parameter("bias", Tensor::zeros({out_features}, options.dtype, options.device), false);
}

// The linear and LayerNorm functions take the parameters themselves: under bf16/f16 compute they compute with
// the held compute copies and return the parameters' gradients as f32 sums (autograd/compute_parameters.h).
autograd::Variable Linear::forward(const autograd::Variable& x, const autograd::Variable& residual) const {
  return autograd::linear(x, weight(), bias(), residual);
}

autograd::Variable gelu_mlp(const Linear& fc, const Linear& proj, const autograd::Variable& x,
                            const autograd::Variable& residual) {
  return autograd::gelu_mlp(x, fc.weight(), fc.bias(), proj.weight(), proj.bias(), residual);
}

LayerNorm::LayerNorm(std::string prefix, int64_t dim, bool bias, double eps, const ParameterOptions& options)
    : Module(std::move(prefix)), eps_(eps) {
  weight_ = &add_parameter("weight", Tensor::full({dim}, 1.0, options.dtype, options.device), false);
  if (bias) bias_ = &add_parameter("bias", Tensor::zeros({dim}, options.dtype, options.device), false);
}

autograd::Variable LayerNorm::forward(const autograd::Variable& x) const {
  return autograd::layernorm(x, weight(), bias(), eps_);
}

NsaCompressor::NsaCompressor(std::string prefix, int64_t block, int64_t features, double init_std,
                             const ParameterOptions& options)
    : Module(std::move(prefix)), options_(options) {
  pos_ = &add_parameter("pos", normal_init(child_prefix("pos"), {block, features}, init_std, options), false);
  weight_ =
      &add_parameter("weight", normal_init(child_prefix("weight"), {features, block * features}, init_std, options),
                     /*decay=*/true);
}

Embedding::Embedding(std::string prefix, int64_t num, int64_t dim, double init_std, const ParameterOptions& options)
    : Module(std::move(prefix)), options_(options) {
  weight_ = &add_parameter("weight", normal_init(child_prefix("weight"), {num, dim}, init_std, options), false);
}

autograd::Variable Embedding::forward(const Tensor& ids, bool ids_checked) const {
  return autograd::embedding(ids, *weight_, ids_checked, options_.compute());
}

}  // namespace alpha::nn
