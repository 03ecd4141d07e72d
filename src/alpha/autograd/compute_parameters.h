// Parameters as the functions with linear layers and LayerNorms compute with them, and how their gradients come
// back (functions_matmul.cpp, functions_layernorm.cpp, functions_recompute.cpp, functions_cross_entropy.cpp).
//
// Why: under bf16 or f16 compute with f32 master weights, a cast in front of a layer gets the weight's gradient
// in the compute dtype, rounded there, and widens it back to f32 in a pass of its own. Taking the master itself,
// the function computes with its held compute copy and keeps the gradient's f32 sums: a linear layer's from the
// weight-gradient product summed straight into f32 (ops::linear_param_grads_into), a LayerNorm's as its backward
// writes them (ops::layernorm_backward). No rounding of the gradient, no conversion pass.
#pragma once
#include <string_view>
#include <vector>

#include "alpha/autograd/variable.h"
#include "alpha/ops/layernorm.h"

namespace alpha::autograd {

// A parameter in the compute dtype: its value, or, for a master in another float dtype (an f32 weight under
// bf16 compute), its held compute copy (cast_value). Undefined for an undefined parameter.
struct ComputeParameter {
  Tensor value;
  bool master = false;       // the parameter's own dtype is not the compute dtype
  DType dtype = DType::f32;  // the parameter's own
};
ComputeParameter compute_parameter(std::string_view op, std::string_view arg, const Variable& parameter, DType compute);

// A layer's weight and (possibly undefined) bias in the compute dtype.
struct WeightAndBias {
  ComputeParameter weight, bias;

  WeightAndBias(std::string_view op, const Variable& weight, const Variable& bias, DType compute);
};

// A linear layer's.
struct LinearParameters : WeightAndBias {
  using WeightAndBias::WeightAndBias;
  // Whether the compute-dtype backward (ops::linear_backward, ops::gelu_linear_backward) is to compute the
  // weight's or the bias's gradient: wanted, and not a master's.
  bool weight_grad_in_compute(bool wanted) const { return wanted && !weight.master; }
  bool bias_grad_in_compute(bool wanted) const { return wanted && !bias.master; }
  // The wanted masters' gradients from the layer's output gradient dy and input x, summed in f32 (f64 for f64
  // compute) and returned in the masters' dtypes; the other slots are left as they are.
  void master_grads(const Tensor& dy, const Tensor& x, bool want_weight, bool want_bias, Tensor& dweight,
                    Tensor& dbias) const;
};

// A LayerNorm's.
struct NormParameters : WeightAndBias {
  using WeightAndBias::WeightAndBias;
  // ops::layernorm_backward's gradients {dx, dweight, dbias}, the parameters' sums in the parameters' dtypes.
  std::vector<Tensor> grads(const ops::LayerNormGrads& g) const;
};

// The GELU MLP's backward (gelu_mlp, layernorm_gelu_mlp): from the output gradient g, the MLP's input x (read
// only when needs[0] or needs[1]), fc's pre-activation and h = gelu(pre), the gradients of x, fc's weight and
// bias and proj's weight and bias, as `needs` asks (in that order). fc's bias gradient is the sum of dpre that
// proj's DGELU pass makes in the compute dtype, widened for a master.
std::vector<Tensor> mlp_backward(const Tensor& g, const Tensor& x, const Tensor& pre, const Tensor& h,
                                 const LinearParameters& fc, const LinearParameters& proj,
                                 const std::vector<bool>& needs);

}  // namespace alpha::autograd
