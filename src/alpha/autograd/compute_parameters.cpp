#include "alpha/autograd/compute_parameters.h"

#include "alpha/autograd/functions.h"
#include "alpha/ops/check.h"
#include "alpha/ops/matmul.h"

namespace alpha::autograd {

ComputeParameter compute_parameter(std::string_view op, std::string_view arg, const Variable& parameter,
                                   DType compute) {
  if (!parameter.defined()) return {};
  if (parameter.dtype() == compute) return {parameter.value(), false, compute};
  ops::check_dtype(op, arg, parameter.value(), {DType::f32, DType::f64, DType::bf16, DType::f16});
  return {cast_value(parameter, compute), true, parameter.dtype()};
}

WeightAndBias::WeightAndBias(std::string_view op, const Variable& weight, const Variable& bias, DType compute)
    : weight(compute_parameter(op, "weight", weight, compute)), bias(compute_parameter(op, "bias", bias, compute)) {}

void LinearParameters::master_grads(const Tensor& dy, const Tensor& x, bool want_weight, bool want_bias,
                                    Tensor& dweight, Tensor& dbias) const {
  const bool master_weight = want_weight && weight.master, master_bias = want_bias && bias.master;
  if (!master_weight && !master_bias) return;
  const DType sums = accumulation_dtype(x.dtype());
  Tensor dw = master_weight ? Tensor::empty(weight.value.shape(), sums, x.device()) : Tensor();
  Tensor db = master_bias ? Tensor::empty(bias.value.shape(), sums, x.device()) : Tensor();
  ops::linear_param_grads_into(dy, x, dw, db, /*accumulate=*/false);
  if (master_weight) dweight = dw.to(weight.dtype);
  if (master_bias) dbias = db.to(bias.dtype);
}

std::vector<Tensor> NormParameters::grads(const ops::LayerNormGrads& g) const {
  return {g.dx, g.dweight.defined() ? g.dweight.to(weight.dtype) : Tensor(),
          g.dbias.defined() ? g.dbias.to(bias.dtype) : Tensor()};
}

}  // namespace alpha::autograd
