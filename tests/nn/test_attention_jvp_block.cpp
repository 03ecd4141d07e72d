// The JVP of a causal self-attention block (nn/attention_jvp.h) in f64: out is the block (written here with
// tensor ops), tangent_out its central difference along tx, and the gradients of both, with respect to x, tx
// and the four parameters, central differences of their sum: what a Jacobian-vector regulariser in a
// training loop backpropagates.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "alpha/nn/attention_jvp.h"
#include "alpha/ops/matmul.h"
#include "support/checks.h"

namespace alpha::nn {
namespace {

using autograd::Variable;

constexpr int64_t kB = 2, kT = 5, kC = 8, kHeads = 2, kKvHeads = 1, kHeadDim = kC / kHeads;
constexpr double kSoftcap = 2.0;

struct Block {
  ParameterOptions options{.seed = test::fresh_seed(), .dtype = DType::f64, .device = Device::cpu(), .compute_dtype = {}};
  Linear qkv{"qkv", kC, (kHeads + 2 * kKvHeads) * kHeadDim, true, 0.5, options};
  Linear proj{"proj", kC, kC, true, 0.5, options};
  // Bias values away from their initial zeros, so that a bias wrongly kept in a tangent would show.
  Block() {
    for (Linear* layer : {&qkv, &proj}) {
      Variable& bias = layer->parameter(layer->prefix() + ".bias");
      bias = Variable(test::random(bias.shape(), DType::f64), true);
    }
  }

  SelfAttentionJvp jvp(const Variable& x, const Variable& tx) const {
    return causal_self_attention_jvp(qkv, proj, kHeads, kKvHeads, kSoftcap, x, tx, {.hvp_eps = 1e-5});
  }
};

// The block's output from its definition: y = proj(attention(q, k, v)), (q, k, v) the fused projection's
// feature ranges.
Tensor block_forward(Block& block, const Tensor& x) {
  const Tensor qkv = ops::linear(x, block.qkv.parameter("qkv.weight").value(), block.qkv.parameter("qkv.bias").value());
  auto heads = [&](int64_t first_head, int64_t count) {
    return qkv.slice(2, first_head * kHeadDim, (first_head + count) * kHeadDim).reshape({kB, kT, count, kHeadDim});
  };
  ops::AttentionConfig config;
  config.causal = true;
  config.softcap = kSoftcap;
  const ops::AttentionOutput y = ops::attention_materialized(heads(0, kHeads), heads(kHeads, kKvHeads),
                                                             heads(kHeads + kKvHeads, kKvHeads), config);
  return ops::linear(y.out.reshape({kB, kT, kC}), block.proj.parameter("proj.weight").value(),
                     block.proj.parameter("proj.bias").value());
}

TEST(CausalSelfAttentionJvp, OutIsTheBlockAndTangentItsDerivative) {
  Block block;
  const Tensor x = test::random({kB, kT, kC}, DType::f64), tx = test::random({kB, kT, kC}, DType::f64);
  autograd::NoGradGuard no_grad;
  const SelfAttentionJvp got = block.jvp(Variable(x), Variable(tx));
  EXPECT_TRUE(test::all_close(got.out.value(), block_forward(block, x), "attention_jvp"));
  // Central difference along tx at h = 1e-5: the tolerance of the attention JVP's own finite-difference test.
  constexpr double h = 1e-5;
  std::vector<double> up = x.to_vector<double>(), down = up;
  const std::vector<double> direction = tx.to_vector<double>();
  for (size_t e = 0; e < up.size(); ++e) up[e] += h * direction[e], down[e] -= h * direction[e];
  std::vector<double> plus = block_forward(block, Tensor::from_vector(up, x.shape())).to_vector<double>();
  const std::vector<double> minus = block_forward(block, Tensor::from_vector(down, x.shape())).to_vector<double>();
  for (size_t e = 0; e < plus.size(); ++e) plus[e] = (plus[e] - minus[e]) / (2 * h);
  EXPECT_TRUE(test::all_close(got.tangent_out.value(), Tensor::from_vector(plus, x.shape()),
                              "attention_jvp.finite_difference"));
}

// The gradients of Σ (out + tangent_out)∘W with respect to x, tx and every parameter.
TEST(CausalSelfAttentionJvp, GradientsMatchFiniteDifferences) {
  Block block;
  const std::vector<std::string> names = {"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"};
  std::vector<Tensor> values = {test::random({kB, kT, kC}, DType::f64), test::random({kB, kT, kC}, DType::f64)};
  for (const std::string& name : names) {
    Linear& layer = name.starts_with("qkv") ? block.qkv : block.proj;
    values.push_back(layer.parameter(name).value().clone());
  }
  auto both = [&](const std::vector<Variable>& inputs) {
    for (size_t i = 0; i < names.size(); ++i) {
      Linear& layer = names[i].starts_with("qkv") ? block.qkv : block.proj;
      layer.parameter(names[i]) = inputs[2 + i];
    }
    const SelfAttentionJvp y = block.jvp(inputs[0], inputs[1]);
    return autograd::add(y.out, y.tangent_out);
  };
  EXPECT_TRUE(test::gradcheck(both, values));
  autograd::clear_tape();
}

}  // namespace
}  // namespace alpha::nn
