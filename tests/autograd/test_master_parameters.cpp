// Layers that take master parameters (autograd/compute_parameters.h), for linear, gelu_mlp, layernorm,
// layernorm_linear and layernorm_gelu_mlp: a layer given its parameters in a wider dtype than its input gives
// the same output and input gradient as over casts of them, and returns their gradients in their own dtype as
// sums of the compute dtype's accumulation:
// - on the CPU (f64 masters, f32 compute, whose gradients are f32 sums either way): the same bits as the casts';
// - on a GPU (f32 masters, bf16 compute): the f32 sums that the casts' bf16 gradients are rounded from, so
//   within half a bf16 step of them and, but for gelu_mlp's fc bias (the DGELU pass's bf16 column sums), not
//   themselves bf16 values.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "support/checks.h"
#include "support/gpu.h"

namespace alpha::autograd {
namespace {

using Layer = std::function<Variable(const Variable& x, const std::vector<Variable>& params)>;

struct Run {
  Tensor y, dx;
  std::vector<Tensor> param_grads;
};

// layer(x, params) on x in the compute dtype and leaves `param_values` in the master dtype, passed as masters or
// each through cast() to x's dtype; then the backward of dy.
Run run(const Layer& layer, const Tensor& x_value, const std::vector<Tensor>& param_values, const Tensor& dy,
        bool masters) {
  clear_tape();
  Variable x(x_value.clone(), true);
  std::vector<Variable> leaves, params;
  for (const Tensor& v : param_values) {
    leaves.emplace_back(v.clone(), true);
    params.push_back(masters ? leaves.back() : cast(leaves.back(), x_value.dtype()));
  }
  Variable y = layer(x, params);
  backward(y, dy);
  Run r{y.value(), x.grad(), {}};
  for (const Variable& leaf : leaves) r.param_grads.push_back(leaf.grad());
  return r;
}

struct LayerCase {
  std::string name;
  Layer layer;
  Shape y_shape;
  std::vector<Shape> param_shapes;
  std::vector<bool> summed_in_compute_dtype;  // the function sums this gradient in the compute dtype itself
};

constexpr int64_t kIn = 12, kHidden = 16, kOut = 7;
const Shape kX{2, 5, kIn};

// The five functions.
std::vector<LayerCase> layer_cases() {
  const std::vector<Shape> norm{{kIn}, {kIn}}, linear_params{{kOut, kIn}, {kOut}},
      mlp_params{{kHidden, kIn}, {kHidden}, {kIn, kHidden}, {kIn}};
  auto with_norm = [&](const std::vector<Shape>& params) {
    std::vector<Shape> all = norm;
    all.insert(all.end(), params.begin(), params.end());
    return all;
  };
  return {
      {"linear",
       [](const Variable& x, const std::vector<Variable>& p) { return linear(x, p[0], p[1]); },
       {2, 5, kOut},
       linear_params,
       {false, false}},
      {"gelu_mlp",
       [](const Variable& x, const std::vector<Variable>& p) { return gelu_mlp(x, p[0], p[1], p[2], p[3]); },
       kX,
       mlp_params,
       {false, true, false, false}},
      {"layernorm",
       [](const Variable& x, const std::vector<Variable>& p) { return layernorm(x, p[0], p[1], 1e-5); },
       kX,
       norm,
       {false, false}},
      {"layernorm_linear",
       [](const Variable& x, const std::vector<Variable>& p) {
         return layernorm_linear(x, {p[0], p[1], 1e-5}, p[2], p[3]);
       },
       {2, 5, kOut},
       with_norm(linear_params),
       {false, false, false, false}},
      {"layernorm_gelu_mlp",
       [](const Variable& x, const std::vector<Variable>& p) {
         return layernorm_gelu_mlp(x, {p[0], p[1], 1e-5}, p[2], p[3], p[4], p[5]);
       },
       kX,
       with_norm(mlp_params),
       {false, false, false, true, false, false}},
  };
}

// Both runs of every case; check(case, parameter index, master's gradient, cast's gradient) judges the gradients.
void for_each_case(DType master, DType compute, Device device,
                   const std::function<void(const LayerCase&, size_t, const Tensor&, const Tensor&)>& check) {
  for (const LayerCase& c : layer_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = test::random(kX, compute).to(device), dy = test::random(c.y_shape, compute).to(device);
    std::vector<Tensor> params;
    for (const Shape& s : c.param_shapes) params.push_back(test::random(s, master).to(device));
    const Run masters = run(c.layer, x, params, dy, true), casts = run(c.layer, x, params, dy, false);
    EXPECT_TRUE(test::bit_equal(masters.y, casts.y)) << "output";
    EXPECT_TRUE(test::bit_equal(masters.dx, casts.dx)) << "input gradient";
    for (size_t i = 0; i < params.size(); ++i) {
      SCOPED_TRACE("parameter " + std::to_string(i));
      ASSERT_EQ(masters.param_grads[i].dtype(), master);
      check(c, i, masters.param_grads[i], casts.param_grads[i]);
    }
  }
}

TEST(MasterParameters, F64MastersUnderF32ComputeGetTheCastsGradients) {
  for_each_case(DType::f64, DType::f32, Device::cpu(),
                [](const LayerCase&, size_t, const Tensor& m, const Tensor& c) { EXPECT_TRUE(test::bit_equal(m, c)); });
}

TEST(MasterParameters, AParameterOfANonFloatDtypeRaises) {
  Variable x(test::random({3, 4}), true);
  Variable weight(test::random({2, 4}).to(DType::i32), false);
  EXPECT_ALPHA_ERROR(linear(x, weight, Variable()), DTypeError, "[linear]", "'weight'");
}

class CudaMasterParameters : public test::GpuTest<> {};

TEST_F(CudaMasterParameters, F32MastersUnderBf16ComputeGetUnroundedSums) {
#if ALPHA_WITH_CUDA
  for_each_case(DType::f32, DType::bf16, Device::cuda(0),
                [](const LayerCase& c, size_t i, const Tensor& master, const Tensor& cast) {
                  const std::vector<double> m = master.to(Device::cpu()).to_vector<double>(),
                                            r = cast.to(Device::cpu()).to_vector<double>(),
                                            m_in_bf16 = master.to(DType::bf16).to(Device::cpu()).to_vector<double>();
                  bool any_off_bf16 = false;
                  for (size_t k = 0; k < m.size(); ++k) {
                    // The cast's gradient is the same sum rounded to bf16 (8 bits of mantissa: within 2⁻⁸ of it),
                    // up to the order cuBLAS sums in for either output dtype.
                    EXPECT_LE(std::fabs(m[k] - r[k]), std::ldexp(std::fabs(m[k]), -8) + 1e-6) << "element " << k;
                    any_off_bf16 |= m_in_bf16[k] != m[k];
                  }
                  EXPECT_EQ(any_off_bf16, !c.summed_in_compute_dtype[i]) << "some sum is not a bf16 value";
                });
#endif
}

}  // namespace
}  // namespace alpha::autograd
