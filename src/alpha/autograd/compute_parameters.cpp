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
  // A destination (of the master's dtype) takes the sums themselves when they are of that dtype, else their
  // conversion, which is a pass of its own either way.
  const Tensor weight_destination = master_weight ? gradient_destination(weight_input) : Tensor(),
               bias_destination = master_bias ? gradient_destination(weight_input + 1) : Tensor();
  auto sums_buffer = [&](const ComputeParameter& parameter, const Tensor& destination) {
    return destination.defined() && destination.dtype() == sums
               ? destination
               : Tensor::empty(parameter.value.shape(), sums, x.device());
  };
  auto in_master_dtype = [](const Tensor& sum, const Tensor& destination, DType dtype) {
    if (sum.dtype() == dtype) return sum;
    if (!destination.defined()) return sum.to(dtype);
    Tensor(destination).copy_from(sum);
    return destination;
  };
  Tensor dw = master_weight ? sums_buffer(weight, weight_destination) : Tensor();
  Tensor db = master_bias ? sums_buffer(bias, bias_destination) : Tensor();
  ops::linear_param_grads_into(dy, x, dw, db, /*accumulate=*/false);
  if (master_weight) dweight = in_master_dtype(dw, weight_destination, weight.dtype);
  if (master_bias) dbias = in_master_dtype(db, bias_destination, bias.dtype);
}

std::vector<Tensor> NormParameters::grads(const ops::LayerNormGrads& g) const {
  return {g.dx, g.dweight.defined() ? g.dweight.to(weight.dtype) : Tensor(),
          g.dbias.defined() ? g.dbias.to(bias.dtype) : Tensor()};
}

}  // namespace alpha::autograd
