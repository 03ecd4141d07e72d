// Stochastic rounding of the compute copy (core/half.h's round_stochastic, kernels/optim.h): the rounding is
// unbiased and lands on one of the two neighbours, leaves representable values (and inf, NaN) alone, overflows
// to inf only past the largest finite value, and its bits are a pure function of (seed, tensor, step,
// element): the same again, different for another step or tensor, a shard's equal to the whole tensor's, the
// same for every thread count, the multi-tensor kernels and the list op equal to the single-tensor ones. The
// copy an AdamW step writes is stochastic_round of the param it leaves (what a resumed run restores).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <tuple>

#include "alpha/core/half.h"
#include "alpha/kernels/optim.h"
#include "alpha/ops/optim.h"
#include "kernels/kernel_helpers.h"
#include "support/adamw_configs.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::random;

// A result further than this many standard errors from x fails the unbiasedness test. With the few dozen
// means checked here, a correct rounding fails by chance with probability about 1e-5 (and never: the
// draws are fixed Philox bits), while a rounding biased by a tenth of the gap is off by ~60 standard errors.
constexpr double kStandardErrors = 5.0;
constexpr int64_t kDraws = 1 << 18;

template <class C> float to_float(C c) { return float(c); }
template <class C> C from_bits(uint16_t bits) {
  C c;
  c.bits = bits;
  return c;
}

// n copies of x rounded to C by the CPU kernel, with the bits of (seed, tensor 3, step 5).
template <class C>
std::vector<C> round_many(float x, int64_t n, uint64_t seed = 42) {
  std::vector<float> xs(size_t(n), x);
  std::vector<C> out(static_cast<size_t>(n));
  kernels::cpu::stochastic_round(kernels::StochasticRoundArgs<C>{
      xs.data(), out.data(), n, {seed, kernels::stochastic_rounding_stream(3, 5), 0}});
  return out;
}

// x's neighbours in C toward and away from zero (x not representable): the truncation and the next value.
template <class C>
std::pair<float, float> neighbours(float x) {
  // A rounding whose random bits are all ones never rounds up; all zeros rounds up unless x is exact.
  return {to_float(round_stochastic<C>(x, 0xffffffffu)), to_float(round_stochastic<C>(x, 0u))};
}

template <class C>
void expect_unbiased(float x) {
  SCOPED_TRACE(std::string(dtype_name(dtype_of<C>)) + " x = " + std::to_string(x));
  auto [low, high] = neighbours<C>(x);
  ASSERT_NE(low, high) << "x must lie between two values of the format";
  ASSERT_LT(std::abs(low), std::abs(x));
  ASSERT_GT(std::abs(high), std::abs(x));
  const double gap = double(high) - double(low), p = (double(x) - double(low)) / gap;
  double sum = 0;
  int64_t ups = 0;
  for (C c : round_many<C>(x, kDraws)) {
    const float r = to_float(c);
    ASSERT_TRUE(r == low || r == high) << r << " is neither neighbour " << low << " nor " << high;
    sum += double(r);
    ups += r == high;
  }
  const double mean = sum / double(kDraws);
  const double standard_error = std::abs(gap) * std::sqrt(p * (1 - p) / double(kDraws));
  EXPECT_NEAR(mean, double(x), kStandardErrors * standard_error)
      << "rounded up " << ups << " of " << kDraws << " times, expected p = " << p;
}

TEST(StochasticRounding, IsUnbiasedBetweenTheTwoNeighbours) {
  for (float x : {1.0f + 0x1p-9f, 1.0f + 0.3f * 0x1p-7f, -3.7f, 0.1f, -1e-30f, 2.5e37f, 1e-40f})
    expect_unbiased<bf16>(x);
  // f16: normals, a subnormal (gap 2^-24), a value below the smallest subnormal, and one near the top.
  for (float x : {1.0f + 0x1p-12f, 1.0f + 0.3f * 0x1p-10f, -3.7f, 0.1f, 3e-6f, 0x1p-26f, -6.5e4f})
    expect_unbiased<f16>(x);
}

// Every finite and infinite value of C comes back unchanged whatever the bits; NaN stays NaN with its sign.
template <class C>
void expect_representable_values_unchanged() {
  SCOPED_TRACE(dtype_name(dtype_of<C>));
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = to_float(from_bits<C>(uint16_t(b)));
    for (uint32_t bits : {0u, 1u, 0x80000000u, 0xffffffffu, b * 0x9e3779b9u}) {
      const C r = round_stochastic<C>(x, bits);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(to_float(r))) << std::hex << b;
        ASSERT_EQ(std::signbit(to_float(r)), std::signbit(x)) << std::hex << b;
      } else {
        ASSERT_EQ(r.bits, b) << std::hex << "value " << b << " with bits " << bits;
      }
    }
  }
}

TEST(StochasticRounding, LeavesRepresentableValuesInfinitiesAndNaNAlone) {
  expect_representable_values_unchanged<bf16>();
  expect_representable_values_unchanged<f16>();
  // An f32 NaN whose payload lies only in the bits bf16 drops stays NaN (not inf).
  const float nan_low_payload = bits_float(0x7f800001u);
  EXPECT_TRUE(std::isnan(to_float(round_stochastic<bf16>(nan_low_payload, 0u))));
  EXPECT_TRUE(std::isnan(to_float(round_stochastic<f16>(nan_low_payload, 0u))));
  EXPECT_EQ(round_stochastic<float>(0.1f, 12345u), 0.1f) << "f32 to f32 is exact";
}

TEST(StochasticRounding, OverflowsToInfOnlyPastTheLargestFiniteValue) {
  const float inf = std::numeric_limits<float>::infinity();
  // bf16: f32's largest value lies between bf16's largest M and inf, 1 - 2^-16 of the gap past M.
  const float f32_max = std::numeric_limits<float>::max(), bf16_max = to_float(from_bits<bf16>(0x7f7f));
  EXPECT_EQ(neighbours<bf16>(f32_max), std::make_pair(bf16_max, inf));
  EXPECT_EQ(neighbours<bf16>(-f32_max), std::make_pair(-bf16_max, -inf));
  int64_t infinite = 0;
  for (bf16 c : round_many<bf16>(f32_max, 4096)) infinite += std::isinf(to_float(c));
  EXPECT_GT(infinite, 4000) << "(f32 max − M) / ulp(M) = 1 − 2^-16";
  // f16: M = 65504 with gap 32: 65520 is inf half the time (round to nearest: always), 65536 and above always.
  EXPECT_EQ(neighbours<f16>(65520.0f), std::make_pair(65504.0f, inf));
  infinite = 0;
  for (f16 c : round_many<f16>(65512.0f, kDraws)) {
    const float r = to_float(c);
    ASSERT_TRUE(r == 65504.0f || r == inf) << r;
    infinite += r == inf;
  }
  const double p = 0.25, share = double(infinite) / double(kDraws);  // (65512 − 65504) / 32
  EXPECT_NEAR(share, p, kStandardErrors * std::sqrt(p * (1 - p) / double(kDraws)));
  for (float x : {65536.0f, 1e5f, 3e38f})
    for (uint32_t bits : {0u, 0xffffffffu}) {
      EXPECT_EQ(to_float(round_stochastic<f16>(x, bits)), inf) << x;
      EXPECT_EQ(to_float(round_stochastic<f16>(-x, bits)), -inf) << x;
    }
  // Below 2^-56 the fraction of f16's smallest gap is under 2^-32: it always rounds to (signed) zero.
  EXPECT_EQ(round_stochastic<f16>(0x1p-57f, 0u).bits, 0u);
  EXPECT_EQ(round_stochastic<f16>(-0x1p-57f, 0u).bits, 0x8000u);
  EXPECT_EQ(round_stochastic<f16>(0x1p-56f, 0u).bits, 1u) << "2^-32 of the gap: up for bits 0 only";
  EXPECT_EQ(round_stochastic<f16>(0x1p-56f, 1u).bits, 0u);
  // The largest f16 subnormal steps up to the smallest normal.
  EXPECT_EQ(round_stochastic<f16>(0x1p-14f - 0x1p-26f, 0u).bits, 0x400u);
}

TEST(StochasticRounding, NegationRoundsToTheNegatedResult) {
  Tensor x = random({4099}, DType::f32, -4, 4);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i];
    const uint32_t bits = philox_bits(7, uint64_t(i));
    ASSERT_EQ(round_stochastic<bf16>(-v, bits).bits, round_stochastic<bf16>(v, bits).bits ^ 0x8000u) << v;
    ASSERT_EQ(round_stochastic<f16>(-v, bits).bits, round_stochastic<f16>(v, bits).bits ^ 0x8000u) << v;
  }
}

// An AdamW step's compute copy, stochastically rounded with (seed, tensor, step, offset).
struct MixedStep {
  Tensor param, grad, m, v;
  explicit MixedStep(int64_t n)
      : param(random({n})), grad(random({n})), m(random({n}, DType::f32, -0.1, 0.1)),
        v(random({n}, DType::f32, 0.01, 1.0)) {}
  MixedStep clone() const {
    MixedStep c = *this;
    for (Tensor* t : {&c.param, &c.grad, &c.m, &c.v}) *t = t->clone();
    return c;
  }
  Tensor copy_after(DType low, const ops::StochasticRounding& rounding, int64_t step) {
    Tensor copy = test::poisoned(param.shape(), low);
    ops::AdamWConfig config{1e-2, 0.9, 0.95, 1e-8, 0.1, step};
    config.stochastic_rounding = rounding;
    ops::adamw_step(param, grad, m, v, copy, config, 0.7);
    return copy;
  }
};

// How many elements of two same-shaped 16-bit tensors differ.
int64_t differing(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  int64_t count = 0;
  for (size_t i = 0; i < x.size(); ++i) count += x[i] != y[i];
  return count;
}

TEST(StochasticRounding, BitsDependOnSeedTensorStepAndElementOnly) {
  const int64_t n = 65537;
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(low));
    const MixedStep start(n);
    const ops::StochasticRounding rounding{1234, 5, 0};
    MixedStep stepped = start.clone();
    const Tensor copy = stepped.copy_after(low, rounding, 3);
    EXPECT_TRUE(test::bit_equal(start.clone().copy_after(low, rounding, 3), copy)) << "the same again";
    {
      test::ThreadCountGuard restore;
      omp_set_num_threads(1);
      EXPECT_TRUE(test::bit_equal(start.clone().copy_after(low, rounding, 3), copy)) << "one thread";
      omp_set_num_threads(3);
      EXPECT_TRUE(test::bit_equal(start.clone().copy_after(low, rounding, 3), copy)) << "three threads";
    }
    // The copy is stochastic_round of the param the step left (what a resumed run restores).
    std::vector<Tensor> params = {stepped.param}, copies = {test::poisoned({n}, low)};
    ops::stochastic_round(params, copies, 3, {rounding});
    EXPECT_TRUE(test::bit_equal(copies[0], copy)) << "the step's copy is stochastic_round of the param it leaves";
    // The same master rounded with another step's, tensor's or seed's bits: a good part of the elements
    // (those whose rounding is not nearly certain) land on the other neighbour.
    for (auto [what, step, r] : {std::tuple<const char*, int64_t, ops::StochasticRounding>{"step", 4, rounding},
                                 {"tensor", 3, {1234, 6, 0}},
                                 {"seed", 3, {1235, 5, 0}}}) {
      std::vector<Tensor> again = {test::poisoned({n}, low)};
      ops::stochastic_round(params, again, step, {r});
      EXPECT_GT(differing(again[0], copy), n / 8) << "another " << what << " draws other bits";
    }
    // A shard [k, n) of the tensor, passing offset k, draws the whole tensor's bits for its elements.
    for (int64_t k : {int64_t(1), int64_t(4096), int64_t(30001)}) {
      std::vector<Tensor> shard = {params[0].slice(0, k, n).contiguous()}, shard_copy = {Tensor::zeros({n - k}, low)};
      ops::stochastic_round(shard, shard_copy, 3, {{1234, 5, k}});
      EXPECT_TRUE(test::bit_equal(shard_copy[0], copy.slice(0, k, n).contiguous())) << "shard from " << k;
    }
  }
}

TEST(StochasticRounding, LandsOnANeighbourOfTheMasterAndOftenNotTheNearest) {
  MixedStep s(4099);
  MixedStep nearest = s.clone();
  Tensor copy = s.copy_after(DType::bf16, {9, 0, 0}, 1);
  Tensor rne = test::poisoned({4099}, DType::bf16);
  ops::adamw_step(nearest.param, nearest.grad, nearest.m, nearest.v, rne, {1e-2, 0.9, 0.95, 1e-8, 0.1, 1}, 0.7);
  ASSERT_TRUE(test::bit_equal(s.param, nearest.param)) << "the master is the same either way";
  const std::vector<float> master = s.param.to_vector<float>();
  const std::vector<float> got = copy.to_vector<float>(), want = rne.to_vector<float>();
  int64_t away = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    auto [low, high] = neighbours<bf16>(master[i]);
    ASSERT_TRUE(got[i] == low || got[i] == high) << i;
    away += got[i] != want[i];
  }
  EXPECT_GT(away, 4099 / 8) << "stochastic rounding must not be round to nearest";
}

TEST(StochasticRounding, ListOpAndMultiTensorKernelsMatchSingleTensorBitForBit) {
  const std::vector<int64_t> sizes = {1, 17, 1000, 4099, 300001};
  std::vector<Tensor> params, grads, ms, vs, copies;
  std::vector<ops::AdamWConfig> configs = test::list_configs(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    const DType low = k % 2 ? DType::f16 : DType::bf16;
    params.push_back(random({sizes[k]}));
    grads.push_back(random({sizes[k]}, k % 3 ? low : DType::f32));
    ms.push_back(random({sizes[k]}, DType::f32, -0.1, 0.1));
    vs.push_back(random({sizes[k]}, DType::f32, 0.01, 1.0));
    copies.push_back(test::poisoned({sizes[k]}, low));
    configs[k].stochastic_rounding = ops::StochasticRounding{77, uint32_t(k), int64_t(k)};
  }
  auto clone = [](const std::vector<Tensor>& list) {
    std::vector<Tensor> out;
    for (const Tensor& t : list) out.push_back(t.clone());
    return out;
  };
  std::vector<Tensor> p1 = clone(params), m1 = clone(ms), v1 = clone(vs), c1 = clone(copies);
  ops::adamw_step(params, grads, ms, vs, copies, configs, 0.7);
  for (size_t k = 0; k < sizes.size(); ++k) {
    ops::adamw_step(p1[k], grads[k], m1[k], v1[k], c1[k], configs[k], 0.7);
    SCOPED_TRACE("tensor " + std::to_string(k));
    EXPECT_TRUE(test::bit_equal(params[k], p1[k]));
    EXPECT_TRUE(test::bit_equal(copies[k], c1[k]));
  }
  // The kernels: multi_stochastic_round against stochastic_round per tensor.
  std::vector<Tensor> multi, single;
  std::vector<kernels::StochasticRoundArgs<bf16>> list;
  for (size_t k = 0; k < sizes.size(); ++k) {
    multi.push_back(test::poisoned({sizes[k]}, DType::bf16));
    single.push_back(test::poisoned({sizes[k]}, DType::bf16));
    const kernels::StochasticRounding r{5, kernels::stochastic_rounding_stream(uint32_t(k), 2), k};
    list.push_back({params[k].data<float>(), multi[k].data<bf16>(), sizes[k], r});
    kernels::cpu::stochastic_round(kernels::StochasticRoundArgs<bf16>{params[k].data<float>(), single[k].data<bf16>(),
                                                                       sizes[k], r});
  }
  kernels::cpu::multi_stochastic_round(std::span<const kernels::StochasticRoundArgs<bf16>>(list));
  for (size_t k = 0; k < sizes.size(); ++k) EXPECT_TRUE(test::bit_equal(multi[k], single[k])) << k;
}

TEST(StochasticRounding, BadInputsRaise) {
  Tensor param = random({4, 4}), grad = random({4, 4}), m = random({4, 4}), v = random({4, 4}, DType::f32, 0, 1);
  ops::AdamWConfig config{1e-2, 0.9, 0.95, 1e-8, 0.0, 1};
  config.stochastic_rounding = ops::StochasticRounding{1, 0, 0};
  EXPECT_ALPHA_ERROR(ops::adamw_step(param, grad, m, v, config), ValueError, "[adamw_step]", "'stochastic_rounding'",
                     "a compute copy");
  Tensor p64 = random({4, 4}, DType::f64), m64 = random({4, 4}, DType::f64), v64 = random({4, 4}, DType::f64, 0, 1);
  Tensor copy64 = Tensor::zeros({4, 4}, DType::f64);
  EXPECT_ALPHA_ERROR(ops::adamw_step(p64, random({4, 4}, DType::f64), m64, v64, copy64, config), DTypeError,
                     "[adamw_step]", "'compute_copy'", "bf16 or f16 beside an f32 param", "f64 beside f64");
  std::vector<Tensor> params = {param}, grads = {grad}, ms = {m}, vs = {v};
  std::vector<Tensor> copies = {Tensor::zeros({4, 4}, DType::bf16)};
  std::vector<ops::AdamWConfig> configs = {config};
  configs[0].stochastic_rounding->offset = -1;
  EXPECT_ALPHA_ERROR(ops::adamw_step(params, grads, ms, vs, copies, configs), ValueError, "[adamw_step]",
                     "'configs[0].stochastic_rounding.offset'", ">= 0");
  std::vector<Tensor> f32_copies = {Tensor::zeros({4, 4}, DType::f32)};
  EXPECT_ALPHA_ERROR(ops::stochastic_round(params, f32_copies, 1, {{}}), DTypeError, "[stochastic_round]",
                     "'copies[0]'", "bf16 or f16");
  std::vector<Tensor> wide = {Tensor::zeros({4, 5}, DType::bf16)};
  EXPECT_ALPHA_ERROR(ops::stochastic_round(params, wide, 1, {{}}), ShapeError, "[stochastic_round]", "'copies[0]'");
  EXPECT_ALPHA_ERROR(ops::stochastic_round(params, copies, 0, {{}}), ValueError, "[stochastic_round]", "'step'");
  EXPECT_ALPHA_ERROR(ops::stochastic_round(params, copies, 1, {}), ValueError, "[stochastic_round]", "'roundings'");
  // An undefined copy: nothing to round for that param.
  std::vector<Tensor> none = {Tensor()};
  ops::stochastic_round(params, none, 1, {{}});
}

}  // namespace
}  // namespace alpha
