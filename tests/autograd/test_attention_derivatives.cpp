// Attention's JVP and HVP as autograd functions (autograd/functions.h): the values are the ops'; the gradients
// of out and of tangent_out with respect to all six inputs against central finite differences in f64 (the
// tangent's gradient with respect to q, k, v is a Hessian-vector product, also held to the exact f64 HVP);
// the refusals (tangent_out's primal gradient without a step, a differentiable HVP). Small shapes: GQA,
// causal with a window and a softcap, Tq != Tk with rows that see no key.
#include <gtest/gtest.h>

#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/ops/attention_hvp.h"
#include "alpha/ops/attention_jvp.h"
#include "alpha/ops/elementwise.h"
#include "support/checks.h"

namespace alpha::autograd {
namespace {

using test::random;

// q [1, 6, 4, 3], k [1, 4, 2, 3], v [1, 4, 2, 2]: GQA 2, Tq > Tk (the first two rows see no key under the
// bottom-right causal mask), a left window and a softcap.
struct Operands {
  Tensor q, k, v, tq, tk, tv;
  std::vector<Tensor> all() const { return {q, k, v, tq, tk, tv}; }
};
Operands make_operands() {
  const Shape q_shape = {1, 6, 4, 3}, k_shape = {1, 4, 2, 3}, v_shape = {1, 4, 2, 2};
  return {random(q_shape, DType::f64), random(k_shape, DType::f64), random(v_shape, DType::f64),
          random(q_shape, DType::f64), random(k_shape, DType::f64), random(v_shape, DType::f64)};
}
const ops::AttentionConfig kConfig{.scale = 0.8, .causal = true, .softcap = 1.5, .window_left = 2};

// The recommended step for f64 (docs/ATTENTION_DERIVATIVES.md).
constexpr AttentionJvpOptions kF64Step{.hvp_eps = 1e-5};

AttentionJvp jvp_of(const std::vector<Variable>& x, const AttentionJvpOptions& options = kF64Step) {
  return attention_jvp(x[0], x[1], x[2], x[3], x[4], x[5], kConfig, options);
}

TEST(AttentionJvpAutograd, ValuesAreTheFusedOps) {
  const Operands x = make_operands();
  Variable q(x.q, true);
  const AttentionJvp got =
      attention_jvp(q, Variable(x.k), Variable(x.v), Variable(x.tq), Variable(x.tk), Variable(x.tv), kConfig);
  const ops::AttentionJvpOutput want = ops::attention_jvp_fused(x.q, x.k, x.v, x.tq, x.tk, x.tv, kConfig);
  EXPECT_TRUE(test::bit_equal(got.out.value(), want.out));
  EXPECT_TRUE(test::bit_equal(got.tangent_out.value(), want.tangent_out));
  EXPECT_TRUE(got.out.requires_grad());
  EXPECT_TRUE(got.tangent_out.requires_grad());
  clear_tape();
}

TEST(AttentionJvpAutograd, OutGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(test::gradcheck([](const std::vector<Variable>& x) { return jvp_of(x).out; }, make_operands().all()));
}

// ⟨tO, G⟩'s gradient: attention's backward of G for (tq, tk, tv), H·(tq, tk, tv) for (q, k, v).
TEST(AttentionJvpAutograd, TangentGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(
      test::gradcheck([](const std::vector<Variable>& x) { return jvp_of(x).tangent_out; }, make_operands().all()));
}

// The gradient of ⟨tO, G⟩ with respect to (q, k, v) is the HVP of ⟨O, G⟩ along the tangent: the exact f64
// HVP, within the central difference's tolerance at the step used.
TEST(AttentionJvpAutograd, TangentPrimalGradientIsTheHessianVectorProduct) {
  const Operands x = make_operands();
  std::vector<Variable> vars;
  for (const Tensor& t : x.all()) vars.emplace_back(t.clone(), true);
  const AttentionJvp y = jvp_of(vars);
  const Tensor g = random(y.tangent_out.shape(), DType::f64);
  backward(y.tangent_out, g);
  const ops::AttentionHvp want = ops::attention_hvp_exact(x.q, x.k, x.v, g, x.tq, x.tk, x.tv, kConfig);
  const test::Tolerance tol = test::tolerance("attention_hvp.central_difference", DType::f64);
  double scale = 0;
  for (const Tensor& t : {want.hq, want.hk, want.hv})
    for (double e : t.to_vector<double>()) scale = std::max(scale, std::abs(e));
  const test::Tolerance scaled{tol.abs * scale, tol.rel};
  EXPECT_TRUE(test::all_close(vars[0].grad(), want.hq, scaled));
  EXPECT_TRUE(test::all_close(vars[1].grad(), want.hk, scaled));
  EXPECT_TRUE(test::all_close(vars[2].grad(), want.hv, scaled));
}

// Without a step, tangent_out is differentiable with respect to the tangents only: asking backward for a
// primal gradient through it raises (out's primal gradients need no step).
TEST(AttentionJvpAutograd, TangentPrimalGradientWithoutAStepRaises) {
  const Operands x = make_operands();
  Variable tq(x.tq, true);
  AttentionJvp y =
      attention_jvp(Variable(x.q), Variable(x.k), Variable(x.v), tq, Variable(x.tk), Variable(x.tv), kConfig);
  backward(sum(y.tangent_out));
  EXPECT_TRUE(tq.grad().defined());

  Variable q(x.q, true);
  y = attention_jvp(q, Variable(x.k), Variable(x.v), Variable(x.tq), Variable(x.tk), Variable(x.tv), kConfig);
  backward(sum(y.out));
  EXPECT_TRUE(q.grad().defined());
  y = attention_jvp(q, Variable(x.k), Variable(x.v), Variable(x.tq), Variable(x.tk), Variable(x.tv), kConfig);
  EXPECT_ALPHA_ERROR(backward(sum(y.tangent_out)), ValueError, "[attention_jvp]", "'options.hvp_eps'", "> 0");
  clear_tape();
}

TEST(AttentionHvpAutograd, ValuesAreTheOpsAndItRefusesToBeRecorded) {
  const Operands x = make_operands();
  const Tensor g = random({1, 6, 4, 2}, DType::f64);
  const ops::AttentionHvp want = ops::attention_hvp(x.q, x.k, x.v, g, x.tq, x.tk, x.tv, kConfig, 1e-5);
  Variable q(x.q, true);
  auto hvp = [&] {
    return attention_hvp(q, Variable(x.k), Variable(x.v), Variable(g), Variable(x.tq), Variable(x.tk), Variable(x.tv),
                         kConfig, 1e-5);
  };
  EXPECT_ALPHA_ERROR(hvp(), ValueError, "[attention_hvp]", "not differentiable", "NoGradGuard");
  NoGradGuard no_grad;
  const AttentionHvp got = hvp();
  EXPECT_TRUE(test::bit_equal(got.hq.value(), want.hq));
  EXPECT_TRUE(test::bit_equal(got.hk.value(), want.hk));
  EXPECT_TRUE(test::bit_equal(got.hv.value(), want.hv));
  EXPECT_FALSE(got.hq.requires_grad());
}

}  // namespace
}  // namespace alpha::autograd
