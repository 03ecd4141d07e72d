// Optimiser kernels against naive f64 loops: three consecutive fused AdamW steps (plain, and mixed
// precision: f32 master with bf16/f16 grads and compute copy), the global grad norm (and its independence
// of the thread count), clipping with the norm as a host value or a tensor, and bad arguments; the
// multi-tensor kernels and the list AdamW op against the single-tensor ones, bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <span>

#include "alpha/kernels/optim.h"
#include "alpha/ops/check.h"
#include "alpha/ops/optim.h"
#include "kernels/kernel_helpers.h"
#include "support/adamw_configs.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

// Naive AdamW on f64 copies of (param, m, v), one step.
struct NaiveAdamW {
  std::vector<double> param, m, v;

  void step(const std::vector<double>& grad, const ops::AdamWConfig& c, double grad_scale) {
    double bc1 = 1 - std::pow(c.beta1, double(c.step)), bc2 = 1 - std::pow(c.beta2, double(c.step));
    for (size_t i = 0; i < param.size(); ++i) {
      double g = grad[i] * grad_scale;
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
      param[i] -= c.lr * c.weight_decay * param[i];
      param[i] -= c.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + c.eps);
    }
  }
};

// Inputs of one AdamW run: random param, moments (v > 0) and three gradients.
struct AdamWCase {
  Tensor param, m, v;
  std::vector<Tensor> grads;
  AdamWCase(const Shape& shape, DType dtype)
      : param(random(shape, dtype)), m(random(shape, dtype, -0.1, 0.1)), v(random(shape, dtype, 0.01, 1.0)) {
    for (int k = 0; k < 3; ++k) grads.push_back(random(shape, dtype));
  }
  NaiveAdamW naive() const { return {param.to_vector<double>(), m.to_vector<double>(), v.to_vector<double>()}; }
};

const ops::AdamWConfig kConfig{/*lr=*/1e-2, /*beta1=*/0.9, /*beta2=*/0.95, /*eps=*/1e-8, /*weight_decay=*/0.1,
                               /*step=*/1};
constexpr double kGradScale = 0.7;

void expect_state(const Tensor& param, const Tensor& m, const Tensor& v, const NaiveAdamW& want, int step) {
  const Shape& s = param.shape();
  EXPECT_TRUE(all_close(m, Tensor::from_vector(want.m, s), "adamw")) << "m after step " << step;
  EXPECT_TRUE(all_close(v, Tensor::from_vector(want.v, s), "adamw")) << "v after step " << step;
  EXPECT_TRUE(all_close(param, Tensor::from_vector(want.param, s), "adamw")) << "param after step " << step;
}

class OptimSizes : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {};

TEST_P(OptimSizes, ThreeAdamWStepsMatchF64Loop) {
  const auto& param = GetParam();
  const auto n = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  AdamWCase c({n}, dtype);
  NaiveAdamW want = c.naive();
  ops::dispatch_cpu_float("test", c.param, [&]<class T>() {
    using A = acc_t<T>;
    for (int step = 1; step <= 3; ++step) {
      ops::AdamWConfig config = kConfig;
      config.step = step;
      want.step(c.grads[size_t(step - 1)].to_vector<double>(), config, kGradScale);
      kernels::cpu::adamw_step(kernels::AdamWArgs<T>{
          c.param.data<T>(), c.grads[size_t(step - 1)].data<T>(), c.m.data<T>(), c.v.data<T>(), A(config.lr),
          A(config.beta1), A(config.beta2), A(config.eps), A(config.weight_decay), A(kGradScale), step, n});
      expect_state(c.param, c.m, c.v, want, step);
    }
  });
}

TEST_P(OptimSizes, SumOfSquaresAndGradNormMatchF64Loop) {
  const auto& param = GetParam();
  const auto n = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  Tensor g = random({n}, dtype);
  double want = 0;
  for (double x : g.to_vector<double>()) want += x * x;
  test::Tolerance tol = test::tolerance("grad_norm", dtype);
  ops::dispatch_cpu_float("test", g, [&]<class T>() {
    double got = std::nan("");
    kernels::cpu::sum_squares(kernels::SumSquaresArgs<T>{g.data<T>(), &got, n});
    EXPECT_NEAR(got, want, tol.abs + tol.rel * want);
  });
  std::vector<Tensor> grads = {g, random({7, 13}, dtype), random({3, 5, 11}, dtype).transpose(0, 2)};
  for (size_t k = 1; k < grads.size(); ++k)
    for (double x : grads[k].contiguous().to_vector<double>()) want += x * x;
  EXPECT_NEAR(ops::global_grad_norm(grads), std::sqrt(want), tol.abs + tol.rel * std::sqrt(want));
}

INSTANTIATE_TEST_SUITE_P(AllSizes, OptimSizes,
                         ::testing::Combine(::testing::ValuesIn(test::kSizes),
                                            ::testing::Values(DType::f32, DType::f64)));

TEST(Optim, AdamWOpOnOddShapeWithStridedGrad) {
  for (DType dtype : {DType::f32, DType::f64}) {
    AdamWCase c({7, 13}, dtype);
    NaiveAdamW want = c.naive();
    for (int step = 1; step <= 3; ++step) {
      ops::AdamWConfig config = kConfig;
      config.step = step + 10;  // resumed training: the bias corrections use the global step
      // The grad arrives as a transposed view of a [13, 7] buffer.
      Tensor grad = c.grads[size_t(step - 1)].transpose(0, 1).contiguous().transpose(0, 1);
      want.step(c.grads[size_t(step - 1)].to_vector<double>(), config, kGradScale);
      ops::adamw_step(c.param, grad, c.m, c.v, config, kGradScale);
      expect_state(c.param, c.m, c.v, want, step);
    }
  }
}

TEST(Optim, GradNormIsIdenticalAcrossThreadCounts) {
  test::ThreadCountGuard restore;
  std::vector<Tensor> grads = {random({300001}), random({65537}, DType::f64), random({3, 5, 11})};
  omp_set_num_threads(1);
  double one = ops::global_grad_norm(grads);
  omp_set_num_threads(3);
  double three = ops::global_grad_norm(grads);
  EXPECT_EQ(std::memcmp(&one, &three, sizeof one), 0) << one << " vs " << three;
}

// The norm in two halves (for a norm over several processes): a slot per tensor holding its Σ g², then the
// slots added in order and square-rooted, the same bits as the norm in one go; a sum over processes between
// the halves adds elementwise.
TEST(Optim, NormInTwoHalvesIsTheNormInOne) {
  std::vector<Tensor> grads = {random({300001}), random({65537}), random({3, 5, 11}).transpose(0, 2)};
  const Tensor squares = ops::sums_of_squares(grads);
  ASSERT_EQ(squares.shape(), (Shape{3}));
  const std::vector<double> slots = squares.to_vector<double>();
  for (size_t k = 0; k < grads.size(); ++k) {
    double want = 0;
    for (double x : grads[k].contiguous().to_vector<double>()) want += x * x;
    EXPECT_NEAR(slots[k], want, 1e-9 * want) << "slot " << k;
  }
  const double whole = ops::global_grad_norm(grads), halves = ops::norm_of_sums_of_squares(squares).item();
  EXPECT_EQ(std::memcmp(&whole, &halves, sizeof whole), 0) << whole << " vs " << halves;
  EXPECT_ALPHA_ERROR(ops::norm_of_sums_of_squares(squares.to(DType::f32)), ValueError, "[norm_of_sums_of_squares]",
                     "'squares'", "f64");
}

TEST(Optim, ClipScalesGradsToMaxNorm) {
  std::vector<Tensor> grads = {random({64}, DType::f64, -3, 3), random({7, 13}, DType::f64, -3, 3)};
  std::vector<std::vector<double>> before = {grads[0].to_vector<double>(), grads[1].to_vector<double>()};
  double norm = ops::global_grad_norm(grads);
  ASSERT_GT(norm, 1.0);
  double coefficient = ops::clip_grad_norm(grads, 1.0, norm);
  EXPECT_DOUBLE_EQ(coefficient, 1.0 / (norm + 1e-6));
  for (size_t k = 0; k < grads.size(); ++k) {
    std::vector<double> after = grads[k].to_vector<double>();
    for (size_t i = 0; i < after.size(); ++i) EXPECT_DOUBLE_EQ(after[i], before[k][i] * coefficient);
  }
  EXPECT_NEAR(ops::global_grad_norm(grads), 1.0, 1e-5);
  // Under the limit nothing changes.
  std::vector<double> unclipped = grads[1].to_vector<double>();
  EXPECT_EQ(ops::clip_grad_norm(grads, 10.0, ops::global_grad_norm(grads)), 1.0);
  EXPECT_EQ(grads[1].to_vector<double>(), unclipped);
}

// Mixed precision: f32 param, m, v; grads in G; the compute copy receives param rounded to G.
template <class G>
void expect_mixed_steps_match(int64_t n) {
  const DType low = dtype_of<G>;
  AdamWCase c({n}, DType::f32);
  for (Tensor& g : c.grads) g = g.to(low);
  NaiveAdamW want = c.naive();
  Tensor copy = test::poisoned({n}, low);
  for (int step = 1; step <= 3; ++step) {
    ops::AdamWConfig config = kConfig;
    config.step = step;
    const Tensor& grad = c.grads[size_t(step - 1)];
    want.step(grad.to_vector<double>(), config, kGradScale);
    kernels::cpu::adamw_step(kernels::AdamWArgs<float, G>{
        c.param.data<float>(), grad.data<G>(), c.m.data<float>(), c.v.data<float>(), float(config.lr),
        float(config.beta1), float(config.beta2), float(config.eps), float(config.weight_decay), float(kGradScale),
        step, n, copy.data<G>()});
    expect_state(c.param, c.m, c.v, want, step);
    // The copy is the updated master rounded to G, bit for bit.
    Tensor rounded = c.param.to(low);
    ASSERT_EQ(std::memcmp(copy.raw_data(), rounded.raw_data(), copy.nbytes()), 0) << "compute copy, step " << step;
  }
}

TEST(Optim, MixedPrecisionStepsMatchF64LoopAndWriteTheComputeCopy) {
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(4096), int64_t(4099), int64_t(65536)}) {
    SCOPED_TRACE(n);
    expect_mixed_steps_match<bf16>(n);
    expect_mixed_steps_match<f16>(n);
  }
}

TEST(Optim, MixedPrecisionOpMatchesKernel) {
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    AdamWCase c({7, 13}, DType::f32);
    Tensor grad = c.grads[0].to(low);
    NaiveAdamW want = c.naive();
    ops::AdamWConfig config = kConfig;
    want.step(grad.to_vector<double>(), config, kGradScale);
    Tensor copy = test::poisoned({7, 13}, low);
    ops::adamw_step(c.param, grad, c.m, c.v, copy, config, kGradScale);
    expect_state(c.param, c.m, c.v, want, 1);
    EXPECT_EQ(copy.to_vector<float>(), c.param.to(low).to_vector<float>());
    // Without a copy: the same master update from a bf16/f16 grad.
    AdamWCase d({7, 13}, DType::f32);
    NaiveAdamW want_d = d.naive();
    Tensor grad_d = d.grads[0].to(low);
    want_d.step(grad_d.to_vector<double>(), config, kGradScale);
    ops::adamw_step(d.param, grad_d, d.m, d.v, config, kGradScale);
    expect_state(d.param, d.m, d.v, want_d, 1);
  }
  // A compute copy in the param's own dtype is a plain copy of the updated param.
  AdamWCase e({5, 3}, DType::f64);
  Tensor copy = test::poisoned({5, 3}, DType::f64);
  ops::adamw_step(e.param, e.grads[0], e.m, e.v, copy, kConfig);
  EXPECT_EQ(copy.to_vector<double>(), e.param.to_vector<double>());
}

TEST(Optim, GradNormTensorAndClipOnTensorNormMatchTheHostPath) {
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Tensor> a = {random({300001}, dtype, -3, 3), random({7, 13}, dtype, -3, 3)};
    std::vector<Tensor> b = {a[0].clone(), a[1].clone()};
    Tensor norm = ops::global_grad_norm_tensor(a);
    EXPECT_EQ(norm.dim(), 0);
    EXPECT_EQ(norm.dtype(), DType::f64);
    const double host_norm = ops::global_grad_norm(b);
    EXPECT_EQ(norm.item(), host_norm);
    Tensor coefficient = ops::clip_grad_norm(a, 1.0, norm);
    EXPECT_EQ(coefficient.item(), ops::clip_grad_norm(b, 1.0, host_norm));
    for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].to_vector<double>(), b[k].to_vector<double>());
    // Under the limit the coefficient is 1 and the grads keep their bits.
    std::vector<double> before = a[1].to_vector<double>();
    EXPECT_EQ(ops::clip_grad_norm(a, 1e9, ops::global_grad_norm_tensor(a)).item(), 1.0);
    EXPECT_EQ(a[1].to_vector<double>(), before);
  }
  // An empty list has norm 0.
  EXPECT_EQ(ops::global_grad_norm_tensor({}).item(), 0.0);
  EXPECT_EQ(ops::global_grad_norm({}), 0.0);
}

// The list step with its per-step terms in memory (ops::adamw_step_terms, what a CUDA graph replays) gives the
// bits of the step with them in the configs, for f32 and f64 params, with and without weight decay; bad terms
// raise, naming the argument.
TEST(Optim, ListStepWithTermsInMemoryGivesTheBitsOfTheConfigs) {
  std::vector<Tensor> params = {random({1001}), random({7, 13}, DType::f64)};
  const std::vector<Tensor> grads = {random({1001}), random({7, 13}, DType::f64)};
  std::vector<Tensor> ms = {random({1001}, DType::f32, 0, 1), random({7, 13}, DType::f64, 0, 1)};
  std::vector<Tensor> vs = {random({1001}, DType::f32, 0, 1), random({7, 13}, DType::f64, 0, 1)};
  std::vector<Tensor> copies(2);
  std::vector<ops::AdamWConfig> configs = {{3e-3, 0.9, 0.95, 1e-8, 0.1, 7}, {1e-3, 0.8, 0.99, 1e-6, 0.0, 2}};
  std::vector<Tensor> want_params = {params[0].clone(), params[1].clone()};
  std::vector<Tensor> want_ms = {ms[0].clone(), ms[1].clone()}, want_vs = {vs[0].clone(), vs[1].clone()};
  const Tensor factor = Tensor::full({}, 0.5, DType::f64);
  ops::adamw_step(want_params, grads, want_ms, want_vs, copies, configs, factor);
  const Tensor terms = ops::adamw_step_terms(params, configs);
  EXPECT_EQ(terms.shape(), (Shape{2, 4}));
  std::vector<ops::AdamWConfig> stale = configs;  // lr and step come from the terms, not from these
  for (auto& c : stale) c.lr = 1.0, c.step = 1;
  ops::adamw_step(params, grads, ms, vs, copies, stale, factor, terms);
  for (size_t k = 0; k < params.size(); ++k) {
    EXPECT_TRUE(test::bit_equal(params[k], want_params[k])) << k;
    EXPECT_TRUE(test::bit_equal(ms[k], want_ms[k])) << k;
    EXPECT_TRUE(test::bit_equal(vs[k], want_vs[k])) << k;
  }
  EXPECT_ALPHA_ERROR(ops::adamw_step(params, grads, ms, vs, copies, configs, factor, Tensor()), ValueError,
                     "[adamw_step]", "'terms'");
  EXPECT_ALPHA_ERROR(ops::adamw_step(params, grads, ms, vs, copies, configs, factor, terms.to(DType::f32)), DTypeError,
                     "[adamw_step]", "'terms'");
  EXPECT_ALPHA_ERROR(ops::adamw_step(params, grads, ms, vs, copies, configs, factor, terms.slice(0, 0, 1)), ShapeError,
                     "[adamw_step]", "'terms'");
  EXPECT_ALPHA_ERROR(ops::adamw_step_terms(params, {configs[0]}), ValueError, "[adamw_step_terms]", "'configs'");
}

// The terms written where a step reads them: the values of adamw_step_terms, in place while the shape holds (the
// address a captured launch keeps), anew for another list length.
TEST(Optim, WrittenStepTermsStayInPlaceForTheSameList) {
  const std::vector<Tensor> params = {random({1001}), random({7, 13}, DType::f64)};
  std::vector<ops::AdamWConfig> configs = {{3e-3, 0.9, 0.95, 1e-8, 0.1, 7}, {1e-3, 0.8, 0.99, 1e-6, 0.0, 2}};
  Tensor terms;
  ops::write_adamw_step_terms(terms, params, configs);
  EXPECT_TRUE(test::bit_equal(terms, ops::adamw_step_terms(params, configs)));
  const void* address = terms.raw_data();
  configs[0].step = 8;
  ops::write_adamw_step_terms(terms, params, configs);
  EXPECT_EQ(terms.raw_data(), address) << "rewritten in place";
  EXPECT_TRUE(test::bit_equal(terms, ops::adamw_step_terms(params, configs)));
  ops::write_adamw_step_terms(terms, {params[0]}, {configs[0]});
  EXPECT_EQ(terms.shape(), (Shape{1, 4}));
  EXPECT_ALPHA_ERROR(ops::write_adamw_step_terms(terms, params, {configs[0]}), ValueError, "[adamw_step_terms]",
                     "'configs'");
}

// An f32 master's f16 compute copy rounded stochastically: with the terms in memory the step they hold draws the
// rounding bits, not the configs' (what a replayed CUDA graph's AdamW relies on), the copy's bits those of the
// step with the configs at that step.
TEST(Optim, ListStepWithTermsInMemoryRoundsTheCopyWithTheTermsStep) {
  const Tensor param = random({2053}), grad = random({2053}), m = random({2053}, DType::f32, 0, 1),
               v = random({2053}, DType::f32, 0, 1);
  ops::AdamWConfig config{3e-3, 0.9, 0.95, 1e-8, 0.1, 9};
  config.stochastic_rounding = ops::StochasticRounding{1234, 3, 0};
  auto run = [&](const ops::AdamWConfig& c, const Tensor& terms) {
    std::vector<Tensor> params{param.clone()}, ms{m.clone()}, vs{v.clone()};
    std::vector<Tensor> copies{Tensor::empty({2053}, DType::f16)};
    const Tensor factor = Tensor::full({}, 1.0, DType::f64);
    if (terms.defined())
      ops::adamw_step(params, {grad}, ms, vs, copies, {c}, factor, terms);
    else
      ops::adamw_step(params, {grad}, ms, vs, copies, {c}, factor);
    return copies[0];
  };
  const Tensor want = run(config, Tensor());
  ops::AdamWConfig stale = config;
  stale.step = 1;
  const Tensor terms = ops::adamw_step_terms({param}, {config});
  EXPECT_TRUE(test::bit_equal(run(stale, terms), want));
  Tensor step_one = terms.clone();  // the same update with step 1's rounding bits: some values round the other way
  step_one.data<double>()[3] = 1.0;
  EXPECT_FALSE(test::bit_equal(run(stale, step_one), want));
}

TEST(Optim, NormKernelsMatchNaiveLoops) {
  std::vector<double> squares = {3.0, 0.0, 1e-3, 7.25, 1e6};
  double norm = std::nan(""), coefficient = std::nan("");
  kernels::cpu::grad_norm(kernels::GradNormArgs{squares.data(), int64_t(squares.size()), &norm});
  double total = 0;
  for (double s : squares) total += s;
  EXPECT_EQ(norm, std::sqrt(total));
  kernels::cpu::clip_coefficient(kernels::ClipCoefficientArgs{&norm, 2.0, &coefficient});
  EXPECT_EQ(coefficient, 2.0 / (norm + 1e-6));
  // A NaN norm leaves the grads as they are (coefficient 1), an infinite one zeroes them.
  for (auto [bad, want] : {std::pair<double, double>{std::nan(""), 1.0}, {INFINITY, 0.0}}) {
    kernels::cpu::clip_coefficient(kernels::ClipCoefficientArgs{&bad, 2.0, &coefficient});
    EXPECT_EQ(coefficient, want);
  }
  Tensor x = random({4099});
  std::vector<float> before = x.to_vector<float>();
  const double factor = 0.3;
  kernels::cpu::scale_by(kernels::ScaleByArgs<float>{x.data<float>(), &factor, x.numel()});
  std::vector<float> after = x.to_vector<float>();
  for (size_t i = 0; i < after.size(); ++i) ASSERT_EQ(after[i], float(factor) * before[i]) << i;
}

TEST(Optim, BadInputsRaise) {
  Tensor param = random({4, 4}), grad = random({4, 4}), m = random({4, 4}), v = random({4, 4}, DType::f32, 0, 1);
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, random({4, 5}), m, v, kConfig), ShapeError, "[adamw_step]", "'grad'",
                     "[4, 4]", "[4, 5]");
  Tensor m64 = random({4, 4}, DType::f64);
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m64, v, kConfig), DTypeError, "[adamw_step]", "'m'", "f32", "f64");
  Tensor strided = random({4, 4}).transpose(0, 1);
  EXPECT_ALPHA_ERROR(ops::adamw_step(strided, grad, m, v, kConfig), LayoutError, "[adamw_step]", "'param'",
                     "contiguous");
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m, strided, kConfig), LayoutError, "[adamw_step]", "'v'");
  auto with = [](auto field, double value) {
    ops::AdamWConfig c = kConfig;
    c.*field = value;
    return c;
  };
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m, v, with(&ops::AdamWConfig::beta1, 1.0)), ValueError,
                     "[adamw_step]", "'beta1'", "[0, 1)", "got 1");
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m, v, with(&ops::AdamWConfig::beta2, -0.5)), ValueError,
                     "[adamw_step]", "'beta2'", "got -0.5");
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m, v, with(&ops::AdamWConfig::eps, 0.0)), ValueError,
                     "[adamw_step]", "'eps'");
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m, v, with(&ops::AdamWConfig::lr, -1e-3)), ValueError,
                     "[adamw_step]", "'lr'", "got -0.001");
  ops::AdamWConfig step0 = kConfig;
  step0.step = 0;
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m, v, step0), ValueError, "[adamw_step]", "'step'", "got 0");
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m, v, kConfig, std::nan("")), ValueError, "[adamw_step]",
                     "'grad_scale'");
  // Mixed precision: bf16/f16 grads only for an f32 param; the copy has the grad's dtype and the param's shape.
  Tensor param64 = random({4, 4}, DType::f64), m64b = random({4, 4}, DType::f64);
  Tensor v64 = random({4, 4}, DType::f64, 0, 1);
  EXPECT_ALPHA_ERROR(ops::adamw_step(param64, grad.to(DType::bf16), m64b, v64, kConfig), DTypeError, "[adamw_step]",
                     "'grad'", "f64", "bf16");
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad.to(DType::f64), m, v, kConfig), DTypeError, "[adamw_step]", "'grad'",
                     "mixed precision", "f64");
  Tensor copy = Tensor::zeros({4, 4}, DType::f32);
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad.to(DType::bf16), m, v, copy, kConfig), DTypeError, "[adamw_step]",
                     "'compute_copy'", "bf16", "f32");
  Tensor wide_copy = Tensor::zeros({4, 5}, DType::bf16);
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad.to(DType::bf16), m, v, wide_copy, kConfig), ShapeError,
                     "[adamw_step]", "'compute_copy'", "[4, 4]");
  Tensor strided_copy = Tensor::zeros({4, 4}, DType::bf16).transpose(0, 1);
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad.to(DType::bf16), m, v, strided_copy, kConfig), LayoutError,
                     "[adamw_step]", "'compute_copy'");
  std::vector<Tensor> one = {random({3})};
  EXPECT_ALPHA_ERROR(ops::clip_grad_norm(one, 1.0, Tensor::zeros({}, DType::f32)), DTypeError, "[clip_grad_norm]",
                     "'norm'", "f64");
  EXPECT_ALPHA_ERROR(ops::clip_grad_norm(one, 1.0, Tensor::zeros({2}, DType::f64)), ShapeError, "[clip_grad_norm]",
                     "'norm'");
  EXPECT_ALPHA_ERROR(ops::clip_grad_norm(one, -1.0, Tensor::zeros({}, DType::f64)), ValueError, "[clip_grad_norm]",
                     "'max_norm'");
  std::vector<Tensor> grads = {random({3}), Tensor::zeros({3}, DType::i32)};
  EXPECT_ALPHA_ERROR(ops::global_grad_norm(grads), DTypeError, "[global_grad_norm]", "'grads[1]'", "i32");
  std::vector<Tensor> ok = {random({3})};
  EXPECT_ALPHA_ERROR(ops::clip_grad_norm(ok, 0.0, 1.0), ValueError, "[clip_grad_norm]", "'max_norm'");
  EXPECT_ALPHA_ERROR(ops::clip_grad_norm(ok, 1.0, std::nan("")), ValueError, "[clip_grad_norm]", "'norm'");
  std::vector<Tensor> mixed = {random({3}), random({4, 4}).transpose(0, 1)};
  std::vector<float> first = mixed[0].to_vector<float>();
  EXPECT_ALPHA_ERROR(ops::clip_grad_norm(mixed, 1.0, 100.0), LayoutError, "[clip_grad_norm]", "'grads[1]'");
  EXPECT_EQ(mixed[0].to_vector<float>(), first);  // nothing was scaled before the error
}

// Sizes of a list: one element, odd sizes, and one of many GPU chunks (kernels/cuda/optim.cu: 2048 each).
const std::vector<int64_t> kListSizes = {1, 17, 1000, 4099, 300001};

// A list of AdamW inputs, the param and grad dtype per tensor, compute copies poisoned (NaN).
struct AdamWList {
  std::vector<Tensor> params, grads, ms, vs, copies;
  AdamWList(const std::vector<int64_t>& sizes, const std::vector<std::pair<DType, DType>>& dtypes) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      auto [param, grad] = dtypes[k % dtypes.size()];
      params.push_back(random({sizes[k]}, param));
      grads.push_back(random({sizes[k]}, grad));
      ms.push_back(random({sizes[k]}, param, -0.1, 0.1));
      vs.push_back(random({sizes[k]}, param, 0.01, 1.0));
      copies.push_back(test::poisoned({sizes[k]}, grad));
    }
  }
  AdamWList clone() const {
    AdamWList c = *this;
    for (auto* list : {&c.params, &c.grads, &c.ms, &c.vs, &c.copies})
      for (Tensor& t : *list) t = t.clone();
    return c;
  }
};

// The list op against the single-tensor op on each tensor in turn, bit for bit.
void expect_list_step_matches(const std::vector<int64_t>& sizes, const std::vector<std::pair<DType, DType>>& dtypes,
                              bool with_copies) {
  AdamWList list(sizes, dtypes), single = list.clone();
  const std::vector<ops::AdamWConfig> configs = test::list_configs(sizes.size());
  if (with_copies) ops::adamw_step(list.params, list.grads, list.ms, list.vs, list.copies, configs, kGradScale);
  else ops::adamw_step(list.params, list.grads, list.ms, list.vs, configs, kGradScale);
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (with_copies)
      ops::adamw_step(single.params[k], single.grads[k], single.ms[k], single.vs[k], single.copies[k], configs[k],
                      kGradScale);
    else ops::adamw_step(single.params[k], single.grads[k], single.ms[k], single.vs[k], configs[k], kGradScale);
    SCOPED_TRACE("tensor " + std::to_string(k) + " of " + std::to_string(sizes[k]) + " elements");
    EXPECT_TRUE(test::bit_equal(list.params[k], single.params[k]));
    EXPECT_TRUE(test::bit_equal(list.ms[k], single.ms[k]));
    EXPECT_TRUE(test::bit_equal(list.vs[k], single.vs[k]));
    if (with_copies) {
      EXPECT_TRUE(test::bit_equal(list.copies[k], single.copies[k]));
    }
  }
}

TEST(Optim, ListAdamWStepMatchesPerTensorStepsBitForBit) {
  // f32 and f64 in one list: one launch per dtype, each tensor its own config.
  expect_list_step_matches(kListSizes, {{DType::f32, DType::f32}, {DType::f64, DType::f64}}, false);
  // Mixed precision: f32 masters with bf16 and f16 grads, the compute copies written.
  expect_list_step_matches(kListSizes, {{DType::f32, DType::bf16}, {DType::f32, DType::f16}}, true);
  // More tensors than a GPU launch takes (kernels::cuda::kTensorsPerLaunch).
  std::vector<int64_t> many;
  for (int k = 0; k < 300; ++k) many.push_back(kListSizes[size_t(k) % 4]);
  expect_list_step_matches(many, {{DType::f32, DType::f32}}, false);
}

TEST(Optim, ListAdamWStepTakesStridedGrads) {
  AdamWList list({7 * 13}, {{DType::f32, DType::f32}});
  AdamWList single = list.clone();
  std::vector<Tensor> grads = {random({13, 7}).transpose(0, 1)};
  list.params[0] = list.params[0].view({7, 13});
  list.ms[0] = list.ms[0].view({7, 13});
  list.vs[0] = list.vs[0].view({7, 13});
  ops::adamw_step(list.params, grads, list.ms, list.vs, {kConfig});
  ops::adamw_step(single.params[0], grads[0].contiguous().view({-1}), single.ms[0], single.vs[0], kConfig);
  EXPECT_TRUE(test::bit_equal(list.params[0].view({-1}), single.params[0]));
}

// The multi-tensor CPU kernels write each tensor's own output exactly as the single-tensor kernel does.
template <class T>
void expect_multi_kernels_match() {
  const DType dtype = dtype_of<T>;
  std::vector<Tensor> xs;
  for (int64_t n : kListSizes) xs.push_back(random({n}, dtype, -3, 3));
  const size_t count = xs.size();
  Tensor multi_sums = test::poisoned({int64_t(count)}, DType::f64), single_sums = multi_sums.clone();
  std::vector<kernels::SumSquaresArgs<T>> squares;
  for (size_t k = 0; k < count; ++k) {
    squares.push_back({xs[k].data<T>(), multi_sums.data<double>() + k, xs[k].numel()});
    double* slot = single_sums.data<double>() + k;
    kernels::cpu::sum_squares(kernels::SumSquaresArgs<T>{xs[k].data<T>(), slot, xs[k].numel()});
  }
  kernels::cpu::multi_sum_squares(std::span<const kernels::SumSquaresArgs<T>>(squares));
  EXPECT_TRUE(test::bit_equal(multi_sums, single_sums));
  // Scaling by a host factor (into poisoned outputs) and by a factor in memory (in place), each tensor its own.
  std::vector<Tensor> multi_out, single_out, multi_in_place, single_in_place;
  std::vector<double> factors;
  std::vector<kernels::ScaleArgs<T>> scales;
  std::vector<kernels::ScaleByArgs<T>> scale_bys;
  for (size_t k = 0; k < count; ++k) {
    factors.push_back(0.3 + 0.1 * double(k));
    multi_out.push_back(test::poisoned(xs[k].shape(), dtype));
    single_out.push_back(test::poisoned(xs[k].shape(), dtype));
    multi_in_place.push_back(xs[k].clone());
    single_in_place.push_back(xs[k].clone());
  }
  for (size_t k = 0; k < count; ++k) {
    const int64_t n = xs[k].numel();
    scales.push_back({xs[k].data<T>(), multi_out[k].data<T>(), acc_t<T>(factors[k]), n});
    kernels::cpu::scale(kernels::ScaleArgs<T>{xs[k].data<T>(), single_out[k].data<T>(), acc_t<T>(factors[k]), n});
    scale_bys.push_back({multi_in_place[k].data<T>(), &factors[k], n});
    kernels::cpu::scale_by(kernels::ScaleByArgs<T>{single_in_place[k].data<T>(), &factors[k], n});
  }
  kernels::cpu::multi_scale(std::span<const kernels::ScaleArgs<T>>(scales));
  kernels::cpu::multi_scale_by(std::span<const kernels::ScaleByArgs<T>>(scale_bys));
  for (size_t k = 0; k < count; ++k) {
    EXPECT_TRUE(test::bit_equal(multi_out[k], single_out[k])) << k;
    EXPECT_TRUE(test::bit_equal(multi_in_place[k], single_in_place[k])) << k;
  }
}

TEST(Optim, MultiTensorKernelsMatchSingleTensorKernelsBitForBit) {
  expect_multi_kernels_match<float>();
  expect_multi_kernels_match<double>();
}

TEST(Optim, GradNormAndScalingOfAMixedDtypeListMatchPerTensorKernels) {
  // f32 and f64 interleaved: one multi-tensor launch per dtype, each sum in its tensor's slot.
  std::vector<Tensor> grads;
  for (size_t k = 0; k < kListSizes.size(); ++k)
    grads.push_back(random({kListSizes[k]}, k % 2 ? DType::f64 : DType::f32, -3, 3));
  std::vector<double> squares(grads.size());
  for (size_t k = 0; k < grads.size(); ++k)
    ops::dispatch_cpu_float("test", grads[k], [&]<class T>() {
      kernels::cpu::sum_squares(kernels::SumSquaresArgs<T>{grads[k].data<T>(), &squares[k], grads[k].numel()});
    });
  double want = std::nan("");
  kernels::cpu::grad_norm(kernels::GradNormArgs{squares.data(), int64_t(squares.size()), &want});
  const double got = ops::global_grad_norm(grads);
  EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << got << " vs " << want;
  // Scaling by a host value and by the device-side coefficient: each grad scaled as its own kernel would.
  std::vector<Tensor> scaled, clipped;
  for (const Tensor& g : grads) {
    scaled.push_back(g.clone());
    clipped.push_back(g.clone());
  }
  ops::scale_grads(scaled, 0.37);
  Tensor coefficient = ops::clip_grad_norm(clipped, 0.5 * got, ops::global_grad_norm_tensor(clipped));
  const double c = coefficient.item();
  ASSERT_LT(c, 1.0);
  for (size_t k = 0; k < grads.size(); ++k) {
    Tensor want_scaled = grads[k].clone(), want_clipped = grads[k].clone();
    ops::dispatch_cpu_float("test", grads[k], [&]<class T>() {
      const int64_t n = grads[k].numel();
      kernels::cpu::scale(kernels::ScaleArgs<T>{grads[k].data<T>(), want_scaled.data<T>(), acc_t<T>(0.37), n});
      kernels::cpu::scale_by(kernels::ScaleByArgs<T>{want_clipped.data<T>(), &c, n});
    });
    EXPECT_TRUE(test::bit_equal(scaled[k], want_scaled)) << k;
    EXPECT_TRUE(test::bit_equal(clipped[k], want_clipped)) << k;
  }
}

TEST(Optim, ListAdamWBadInputsRaiseBeforeAnyUpdate) {
  AdamWList list({4, 5, 6}, {{DType::f32, DType::f32}});
  const std::vector<ops::AdamWConfig> configs = test::list_configs(3);
  const std::vector<float> first = list.params[0].to_vector<float>();
  std::vector<Tensor> two_grads = {list.grads[0], list.grads[1]};
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, two_grads, list.ms, list.vs, configs), ValueError, "[adamw_step]",
                     "'grads'", "3 (one per param)", "got 2");
  std::vector<Tensor> one_v = {list.vs[0]};
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, list.grads, list.ms, one_v, configs), ValueError, "[adamw_step]",
                     "'vs'", "got 1");
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, list.grads, list.ms, list.vs, {kConfig}), ValueError,
                     "[adamw_step]", "'configs'", "got 1");
  std::vector<Tensor> two_copies = {list.copies[0], list.copies[1]};
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, list.grads, list.ms, list.vs, two_copies, configs), ValueError,
                     "[adamw_step]", "'compute_copies'", "got 2");
  std::vector<Tensor> wide = {list.grads[0], random({7}), list.grads[2]};
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, wide, list.ms, list.vs, configs), ShapeError, "[adamw_step]",
                     "'grads[1]'", "[5]", "[7]");
  std::vector<Tensor> ms64 = {list.ms[0], list.ms[1], list.ms[2].to(DType::f64)};
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, list.grads, ms64, list.vs, configs), DTypeError, "[adamw_step]",
                     "'ms[2]'", "f32", "f64");
  std::vector<Tensor> f64_grads = {list.grads[0], list.grads[1].to(DType::f64), list.grads[2]};
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, f64_grads, list.ms, list.vs, configs), DTypeError, "[adamw_step]",
                     "'grads[1]'", "mixed precision", "f64");
  std::vector<Tensor> f32_copies = {list.copies[0], list.copies[1].to(DType::f64), list.copies[2]};
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, list.grads, list.ms, list.vs, f32_copies, configs), DTypeError,
                     "[adamw_step]", "'compute_copies[1]'", "f32", "f64");
  std::vector<ops::AdamWConfig> bad = configs;
  bad[2].lr = -1.0;
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, list.grads, list.ms, list.vs, bad), ValueError, "[adamw_step]",
                     "'configs[2].lr'", "got -1");
  EXPECT_ALPHA_ERROR(ops::adamw_step(list.params, list.grads, list.ms, list.vs, configs, -1.0), ValueError,
                     "[adamw_step]", "'grad_scale'");
  EXPECT_EQ(list.params[0].to_vector<float>(), first);  // nothing was updated before the errors
  // An empty list is nothing to do.
  std::vector<Tensor> none;
  ops::adamw_step(none, none, none, none, {});
}

TEST(Optim, TakesAComputeCopyNarrowerThanItsGradBesideANarrowerOrEqualParam) {
  EXPECT_TRUE(ops::adamw_takes_compute_copy(DType::f32, DType::f32, DType::bf16));
  EXPECT_TRUE(ops::adamw_takes_compute_copy(DType::f32, DType::f32, DType::f16));
  EXPECT_TRUE(ops::adamw_takes_compute_copy(DType::f32, DType::bf16, DType::bf16));
  EXPECT_TRUE(ops::adamw_takes_compute_copy(DType::f64, DType::f64, DType::f64));
  EXPECT_FALSE(ops::adamw_takes_compute_copy(DType::f64, DType::f64, DType::f32));
  EXPECT_FALSE(ops::adamw_takes_compute_copy(DType::f32, DType::bf16, DType::f16));
  EXPECT_FALSE(ops::adamw_takes_compute_copy(DType::f32, DType::bf16, DType::f32));
  EXPECT_FALSE(ops::adamw_takes_compute_copy(DType::bf16, DType::f32, DType::bf16));
}

// step_guard: the host's factor (clipping biting, not biting, off; a loss scale of 8), NaN for any non-finite
// input, and its arguments checked.
TEST(Optim, StepGuardIsTheHostFactorOrNaN) {
  const double loss_scale = 8.0;
  const Tensor losses = Tensor::from_vector<double>({2.5, 3.0, 2.75}, {3});
  for (double scaled_norm : {0.0, 3.7, 123.4})
    for (double max_norm : {0.0, 0.5, 1e9}) {
      const double norm = scaled_norm / loss_scale;
      const double coef = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
      const Tensor factor = ops::step_guard(Tensor::full({}, scaled_norm, DType::f64), losses, loss_scale, max_norm);
      EXPECT_EQ(factor.dim(), 0);
      EXPECT_EQ(factor.item(), coef / loss_scale) << scaled_norm << ", " << max_norm;
    }
  const Tensor finite_norm = Tensor::full({}, 3.7, DType::f64);
  for (double bad : {INFINITY, -INFINITY, NAN}) {
    EXPECT_TRUE(std::isnan(ops::step_guard(Tensor::full({}, bad, DType::f64), losses, loss_scale, 1.0).item()));
    const Tensor bad_losses = Tensor::from_vector<double>({2.5, bad, 2.75}, {3});
    EXPECT_TRUE(std::isnan(ops::step_guard(finite_norm, bad_losses, loss_scale, 1.0).item())) << bad;
  }
  // f32 losses (a model's loss as it comes) give the same factor, and NaN for a non-finite one.
  EXPECT_EQ(ops::step_guard(finite_norm, losses.to(DType::f32), loss_scale, 0.5).item(),
            ops::step_guard(finite_norm, losses, loss_scale, 0.5).item());
  EXPECT_TRUE(std::isnan(
      ops::step_guard(finite_norm, Tensor::from_vector<float>({1.0f, INFINITY}, {2}), loss_scale, 0.5).item()));
  EXPECT_ALPHA_ERROR(ops::step_guard(finite_norm, losses.to(DType::i32), 1.0, 1.0), DTypeError, "[step_guard]",
                     "'losses'");
  EXPECT_ALPHA_ERROR(ops::step_guard(finite_norm, losses.reshape({3, 1}), 1.0, 1.0), ShapeError, "[step_guard]",
                     "'losses'");
  EXPECT_ALPHA_ERROR(ops::step_guard(Tensor::full({2}, 1.0, DType::f64), losses, 1.0, 1.0), ShapeError, "[step_guard]",
                     "'scaled_norm'");
  EXPECT_ALPHA_ERROR(ops::step_guard(finite_norm, losses, 0.5, 1.0), ValueError, "[step_guard]", "'loss_scale'");
  EXPECT_ALPHA_ERROR(ops::step_guard(finite_norm, losses, 1.0, -1.0), ValueError, "[step_guard]", "'max_norm'");
}

// The list step reading its factor from a tensor: the host factor's bits; a NaN factor leaves every param,
// moment and compute copy as it was.
TEST(Optim, ListAdamWWithAFactorTensorIsTheHostFactorOrNoStep) {
  auto make = [] {
    std::vector<Tensor> params{test::random({7, 13}, DType::f32), test::random({4099}, DType::f32)};
    return params;
  };
  const std::vector<Tensor> start = make();
  const std::vector<Tensor> grads{test::random({7, 13}, DType::f32, -3.0, 3.0),
                                  test::random({4099}, DType::f32, -3.0, 3.0)};
  const std::vector<Tensor> m0{test::random({7, 13}, DType::f32, -0.1, 0.1),
                               test::random({4099}, DType::f32, -0.1, 0.1)};
  const std::vector<Tensor> v0{test::random({7, 13}, DType::f32, 0.01, 1.0),
                               test::random({4099}, DType::f32, 0.01, 1.0)};
  const std::vector<ops::AdamWConfig> configs(2, {1e-2, 0.9, 0.95, 1e-8, 0.1, 3});
  struct Run {
    std::vector<Tensor> params, ms, vs, copies;
  };
  auto fresh = [&] {
    Run r;
    for (size_t k = 0; k < start.size(); ++k) {
      r.params.push_back(start[k].clone());
      r.ms.push_back(m0[k].clone());
      r.vs.push_back(v0[k].clone());
      r.copies.push_back(start[k].to(DType::bf16));
    }
    return r;
  };
  const double factor = 0.0371;
  Run by_tensor = fresh(), by_value = fresh();
  ops::adamw_step(by_tensor.params, grads, by_tensor.ms, by_tensor.vs, by_tensor.copies, configs,
                  Tensor::full({}, factor, DType::f64));
  ops::adamw_step(by_value.params, grads, by_value.ms, by_value.vs, by_value.copies, configs, factor);
  Run skipped = fresh(), untouched = fresh();
  ops::adamw_step(skipped.params, grads, skipped.ms, skipped.vs, skipped.copies, configs,
                  Tensor::full({}, NAN, DType::f64));
  for (size_t k = 0; k < start.size(); ++k) {
    EXPECT_FALSE(test::bit_equal(by_tensor.params[k], untouched.params[k])) << k << ": no step was taken";
    EXPECT_TRUE(test::bit_equal(by_tensor.params[k], by_value.params[k])) << k;
    EXPECT_TRUE(test::bit_equal(by_tensor.ms[k], by_value.ms[k])) << k;
    EXPECT_TRUE(test::bit_equal(by_tensor.vs[k], by_value.vs[k])) << k;
    EXPECT_TRUE(test::bit_equal(by_tensor.copies[k], by_value.copies[k])) << k;
    EXPECT_TRUE(test::bit_equal(skipped.params[k], untouched.params[k])) << k;
    EXPECT_TRUE(test::bit_equal(skipped.ms[k], untouched.ms[k])) << k;
    EXPECT_TRUE(test::bit_equal(skipped.vs[k], untouched.vs[k])) << k;
    EXPECT_TRUE(test::bit_equal(skipped.copies[k], untouched.copies[k])) << k;
  }
  Run r = fresh();
  EXPECT_ALPHA_ERROR(ops::adamw_step(r.params, grads, r.ms, r.vs, r.copies, configs, Tensor::full({}, 1.0, DType::f32)),
                     DTypeError, "[adamw_step]", "'grad_scale'");
}

}  // namespace
}  // namespace alpha
