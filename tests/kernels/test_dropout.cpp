// Dropout against naive f64 loops over the mask contract (keep element i iff
// dropout_keep(seed, offset + i, p)): kernels called directly into poisoned outputs, the mask's
// statistics and offset semantics, the backward's reuse of the forward mask, gradient checks, bad p.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "alpha/autograd/functions.h"
#include "alpha/core/launch.h"
#include "alpha/core/philox.h"
#include "alpha/kernels/dropout.h"
#include "alpha/ops/check.h"
#include "alpha/ops/dropout.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

// residual + x · keep / (1 − p), or without residual when it is undefined; element index = flat index.
Tensor naive_dropout(const Tensor& x, const ops::DropoutConfig& c, const Tensor& residual = {}) {
  std::vector<double> xv = x.contiguous().to_vector<double>(), out(xv.size());
  std::vector<double> rv = residual.defined() ? residual.contiguous().to_vector<double>() : std::vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    double kept = dropout_keep(c.seed, c.offset + i, float(c.p)) ? xv[i] / (1.0 - c.p) : 0.0;
    out[i] = (residual.defined() ? rv[i] : 0.0) + kept;
  }
  return Tensor::from_vector(out, x.shape());
}

std::vector<uint8_t> mask_values(const Tensor& mask) {
  const uint8_t* p = mask.data<uint8_t>();
  return std::vector<uint8_t>(p, p + mask.numel());
}

ops::DropoutConfig config(double p, uint64_t offset = 12345) { return {p, test::fresh_seed(), offset}; }

class DropoutSizes : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {};

TEST_P(DropoutSizes, KernelsMatchF64Loops) {
  const auto& param = GetParam();
  const auto n = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  // An offset that is not a multiple of 4 starts mid-way through a Philox block.
  ops::DropoutConfig c = config(0.3, 4099);
  Tensor x = random({n}, dtype), dy = random({n}, dtype), residual = random({n}, dtype);
  const float p = float(c.p);
  ops::dispatch_cpu_float("test", x, [&]<class T>() {
    const acc_t<T> scale = acc_t<T>(1.0 / (1.0 - c.p));
    Tensor out = test::poisoned({n}, dtype);
    kernels::cpu::dropout(kernels::DropoutArgs<T>{x.data<T>(), out.data<T>(), p, scale, c.seed, c.offset, n});
    EXPECT_TRUE(all_close(out, naive_dropout(x, c), "dropout"));
    // The backward is the same kernel on dy: same mask, same scale.
    Tensor dx = test::poisoned({n}, dtype);
    kernels::cpu::dropout(kernels::DropoutArgs<T>{dy.data<T>(), dx.data<T>(), p, scale, c.seed, c.offset, n});
    EXPECT_TRUE(all_close(dx, naive_dropout(dy, c), "dropout"));
    EXPECT_TRUE(all_close(ops::dropout_backward(dy, c), naive_dropout(dy, c), "dropout"));
    out = test::poisoned({n}, dtype);
    kernels::cpu::residual_dropout_add(kernels::ResidualDropoutArgs<T>{residual.data<T>(), x.data<T>(),
                                                                       out.data<T>(), p, scale, c.seed, c.offset, n});
    EXPECT_TRUE(all_close(out, naive_dropout(x, c, residual), "dropout"));
  });
  Tensor mask = Tensor::full({n}, 0xAB, DType::u8);  // poison: neither 0 nor 1
  kernels::cpu::dropout_mask(kernels::DropoutMaskArgs{mask.data<uint8_t>(), p, c.seed, c.offset, n});
  std::vector<uint8_t> got = mask_values(mask);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[size_t(i)], dropout_keep(c.seed, c.offset + uint64_t(i), p) ? 1 : 0) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(AllSizes, DropoutSizes,
                         ::testing::Combine(::testing::ValuesIn(test::kSizes),
                                            ::testing::Values(DType::f32, DType::f64)));

TEST(Dropout, OpsOnOddShapesUseTheLogicalFlatIndex) {
  ops::DropoutConfig c = config(0.4);
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = random({3, 5, 11}, dtype), residual = random({3, 5, 11}, dtype);
    EXPECT_TRUE(all_close(ops::dropout(x, c), naive_dropout(x, c), "dropout"));
    EXPECT_TRUE(all_close(ops::residual_dropout_add(residual, x, c), naive_dropout(x, c, residual), "dropout"));
    // A transposed view draws by its own row-major index, not by its storage order.
    Tensor xt = random({13, 7}, dtype).transpose(0, 1);
    EXPECT_TRUE(all_close(ops::dropout(xt, c), naive_dropout(xt, c), "dropout"));
  }
}

TEST(Dropout, KeepRateIsCloseToOneMinusP) {
  // 65536 Bernoulli draws: the standard deviation of the rate is at most 0.002, so 0.01 is 5 sigma.
  for (double p : {0.1, 0.5, 0.9}) {
    std::vector<uint8_t> mask = mask_values(ops::dropout_mask({65536}, config(p)));
    double kept = 0;
    for (uint8_t m : mask) kept += m;
    EXPECT_NEAR(kept / 65536.0, 1.0 - p, 0.01) << "p = " << p;
  }
}

TEST(Dropout, MaskDependsOnlyOnSeedAndOffset) {
  ops::DropoutConfig c = config(0.5);
  std::vector<uint8_t> first = mask_values(ops::dropout_mask({4096}, c));
  EXPECT_EQ(mask_values(ops::dropout_mask({4096}, c)), first);
  EXPECT_EQ(mask_values(ops::dropout_mask({64, 64}, c)), first);  // the shape does not matter, the index does
  auto differing = [&](const ops::DropoutConfig& other) {
    std::vector<uint8_t> m = mask_values(ops::dropout_mask({4096}, other));
    int64_t count = 0;
    for (size_t i = 0; i < m.size(); ++i) count += m[i] != first[i];
    return count;
  };
  // Independent masks at p = 0.5 differ in about half the elements.
  EXPECT_GT(differing({c.p, c.seed, c.offset + 4096}), 1500);
  EXPECT_GT(differing({c.p, c.seed + 1, c.offset}), 1500);
}

TEST(Dropout, SliceAtOffsetPlusKIsTheTailOfTheFullMask) {
  ops::DropoutConfig c = config(0.3, 1000);
  std::vector<uint8_t> full = mask_values(ops::dropout_mask({4099}, c));
  for (uint64_t k : {1, 3, 4, 5, 1031}) {
    std::vector<uint8_t> tail = mask_values(ops::dropout_mask({int64_t(4099 - k)}, {c.p, c.seed, c.offset + k}));
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), full.begin() + int64_t(k))) << "k = " << k;
  }
}

TEST(Dropout, BackwardUsesTheForwardMask) {
  ops::DropoutConfig c = config(0.25);
  const double scale = 1.0 / (1.0 - c.p);
  Tensor x = random({5, 64}, DType::f64, 0.5, 1.0);  // never 0, so y = 0 exactly where dropped
  std::vector<double> y = ops::dropout(x, c).to_vector<double>();
  std::vector<double> dx = ops::dropout_backward(Tensor::full({5, 64}, 1.0, DType::f64), c).to_vector<double>();
  std::vector<uint8_t> mask = mask_values(ops::dropout_mask({5, 64}, c));
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(y[i] != 0.0, mask[i] == 1) << "element " << i;
    EXPECT_EQ(dx[i], mask[i] ? scale : 0.0) << "element " << i;
  }
}

TEST(Dropout, ZeroProbabilityIsTheIdentity) {
  ops::DropoutConfig c = config(0.0);
  Tensor x = random({7, 13}), residual = random({7, 13});
  EXPECT_EQ(ops::dropout(x, c).to_vector<float>(), x.to_vector<float>());
  std::vector<float> sum = ops::residual_dropout_add(residual, x, c).to_vector<float>();
  std::vector<float> xv = x.to_vector<float>(), rv = residual.to_vector<float>();
  for (size_t i = 0; i < sum.size(); ++i) EXPECT_EQ(sum[i], rv[i] + xv[i]);
  for (uint8_t m : mask_values(ops::dropout_mask({4096}, c))) ASSERT_EQ(m, 1);
}

// At p = 0 the residual add's backward hands x the incoming gradient itself: no dropout kernel (a model
// without dropout ran one over every block's residual stream twice a step), and the same values.
TEST(Dropout, ZeroProbabilityResidualAddBackwardLaunchesNothing) {
  autograd::Variable residual(random({6, 9}), true), x(random({6, 9}), true);
  autograd::Variable sum = autograd::residual_dropout_add(residual, x, config(0.0));
  Tensor dy = random({6, 9});
  const uint64_t before = kernel_launches();
  autograd::backward(sum, dy);
  EXPECT_EQ(kernel_launches(), before);
  EXPECT_EQ(x.grad().to_vector<float>(), dy.to_vector<float>());
  EXPECT_EQ(residual.grad().to_vector<float>(), dy.to_vector<float>());
  // The plain dropout's backward follows the same rule.
  autograd::Variable y(random({6, 9}), true);
  autograd::Variable dropped = autograd::dropout(y, config(0.0));
  const uint64_t before_dropout = kernel_launches();
  autograd::backward(dropped, dy);
  EXPECT_EQ(kernel_launches(), before_dropout);
  EXPECT_EQ(y.grad().to_vector<float>(), dy.to_vector<float>());
}

TEST(Dropout, GradientsMatchFiniteDifferences) {
  ops::DropoutConfig c{0.4, 20240607, 17};
  EXPECT_TRUE(test::gradcheck([&](const auto& v) { return autograd::dropout(v[0], c); },
                              {random({5, 7}, DType::f64)}));
  EXPECT_TRUE(test::gradcheck([&](const auto& v) { return autograd::residual_dropout_add(v[0], v[1], c); },
                              {random({3, 11}, DType::f64), random({3, 11}, DType::f64)}));
}

TEST(Dropout, BadInputsRaise) {
  Tensor x = random({4, 4});
  for (double p : {1.0, -0.1, 1.5, std::nan(""), 1.0 - 1e-10}) {
    ops::DropoutConfig c{p, 1, 0};
    EXPECT_ALPHA_ERROR(ops::dropout(x, c), ValueError, "[dropout]", "'p'", "[0, 1)");
    EXPECT_ALPHA_ERROR(ops::dropout_backward(x, c), ValueError, "[dropout_backward]", "'p'");
    EXPECT_ALPHA_ERROR(ops::dropout_mask({4}, c), ValueError, "[dropout_mask]", "'p'");
    EXPECT_ALPHA_ERROR(ops::residual_dropout_add(x, x, c), ValueError, "[residual_dropout_add]", "'p'");
  }
  ops::DropoutConfig c = config(0.1);
  EXPECT_ALPHA_ERROR(ops::residual_dropout_add(x, random({4, 5}), c), ShapeError, "[residual_dropout_add]", "'x'",
                     "[4, 4]", "[4, 5]");
  EXPECT_ALPHA_ERROR(ops::residual_dropout_add(x, random({4, 4}, DType::f64), c), DTypeError,
                     "[residual_dropout_add]", "'x'", "f32", "f64");
  EXPECT_ALPHA_ERROR(ops::dropout(Tensor::zeros({4}, DType::i32), c), DTypeError, "[dropout]", "'x'", "i32");
  EXPECT_ALPHA_ERROR(ops::dropout_mask({4, -1}, c), ShapeError, "[dropout_mask]", "'shape'");
}

}  // namespace
}  // namespace alpha
