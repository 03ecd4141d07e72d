// The parameterised building blocks of the GPT: Linear, LayerNorm, Embedding, NsaCompressor. Weight decay applies to
// linear weights only; biases, norm gains and embedding tables are registered without it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "alpha/autograd/variable.h"
#include "alpha/core/device.h"
#include "alpha/core/dtype.h"
#include "alpha/nn/module.h"

namespace alpha::nn {

// Where and in what precision parameters are created, the model seed their values derive from, and the
// dtype the layers compute in. With a compute dtype different from the parameters' (mixed precision: f32
// parameters, bf16 compute), each layer casts its parameters on use (autograd::cast), so activations are
// in the compute dtype and gradients accumulate into the parameters' dtype.
struct ParameterOptions {
  uint64_t seed = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  std::optional<DType> compute_dtype;  // none: the parameters' dtype

  DType compute() const { return compute_dtype.value_or(dtype); }
  // The parameter as the computation takes it: cast to the compute dtype.
  autograd::Variable for_compute(const autograd::Variable& parameter) const;
};

// y = x·Wᵀ + b: weight [out, in] ~ normal(0, init_std), bias [out] zeros (when `bias`).
class Linear : public Module {
 public:
  Linear(std::string prefix, int64_t in_features, int64_t out_features, bool bias, double init_std,
         const ParameterOptions& options);
  // [..., in] -> [..., out]; with a residual [..., out], residual + the layer's output (autograd::linear).
  autograd::Variable forward(const autograd::Variable& x, const autograd::Variable& residual = {}) const;
  // The parameters as the computation takes them (cast to the compute dtype); the bias is undefined without one.
  autograd::Variable compute_weight() const { return options_.for_compute(*weight_); }
  autograd::Variable compute_bias() const { return bias_ ? options_.for_compute(*bias_) : autograd::Variable(); }
  // The parameters themselves, in the parameters' dtype (for functions that take them so); bias as above.
  const autograd::Variable& weight() const { return *weight_; }
  autograd::Variable bias() const { return bias_ ? *bias_ : autograd::Variable(); }

 private:
  autograd::Variable* weight_;
  autograd::Variable* bias_ = nullptr;
  ParameterOptions options_;
};

// proj(gelu(fc(x))): the GELU MLP as one autograd function (autograd::gelu_mlp), so fc+GELU is one GEMM with
// an epilogue and its backward a DGELU epilogue on proj's input-gradient GEMM; a residual, when given, added by
// proj's GEMM.
autograd::Variable gelu_mlp(const Linear& fc, const Linear& proj, const autograd::Variable& x,
                            const autograd::Variable& residual = {});

// Normalises the last dimension: weight [dim] ones, bias [dim] zeros (when `bias`).
class LayerNorm : public Module {
 public:
  LayerNorm(std::string prefix, int64_t dim, bool bias, double eps, const ParameterOptions& options);
  autograd::Variable forward(const autograd::Variable& x) const;
  // The parameters themselves, in the parameters' dtype, for functions that fuse the normalisation into the
  // layer reading it (autograd::layernorm_linear); the bias is undefined without one.
  const autograd::Variable& weight() const { return *weight_; }
  autograd::Variable bias() const { return bias_ ? *bias_ : autograd::Variable(); }
  double eps() const { return eps_; }

 private:
  autograd::Variable* weight_;
  autograd::Variable* bias_ = nullptr;
  double eps_;
};

// NSA's compressor of one operand (k or v; ops/nsa.h): a per-position embedding pos [block, features] added to
// each block's rows, then a linear map weight [features, block·features] of the flattened block, both
// ~ normal(0, init_std); weight decay applies to the weight.
class NsaCompressor : public Module {
 public:
  NsaCompressor(std::string prefix, int64_t block, int64_t features, double init_std, const ParameterOptions& options);
  // The parameters as the computation takes them (cast to the compute dtype).
  autograd::Variable compute_pos() const { return options_.for_compute(*pos_); }
  autograd::Variable compute_weight() const { return options_.for_compute(*weight_); }

 private:
  autograd::Variable* pos_;
  autograd::Variable* weight_;
  ParameterOptions options_;
};

// A lookup table [num, dim] ~ normal(0, init_std).
class Embedding : public Module {
 public:
  Embedding(std::string prefix, int64_t num, int64_t dim, double init_std, const ParameterOptions& options);
  // i32 [...] -> [..., dim]; ids_checked: the caller range-checked them (autograd::embedding).
  autograd::Variable forward(const Tensor& ids, bool ids_checked = false) const;
  const autograd::Variable& weight() const { return *weight_; }

 private:
  autograd::Variable* weight_;
  ParameterOptions options_;
};

}  // namespace alpha::nn
