// Layer norm against naive f64 loops: the forward and backward kernels directly (into poisoned outputs,
// with and without bias, each backward fed the reference statistics), the tensor ops on strided input
// and with partial gradient requests, gradient checks through autograd, thread-count independence of
// the parameter gradients, and bad inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/layernorm.h"
#include "alpha/ops/check.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/layernorm.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

constexpr double kEps = 1e-5;

struct Reference {
  std::vector<double> y, mean, rstd;     // forward
  std::vector<double> dx, dweight, dbias;  // backward
};

// Two-pass statistics (mean, then the mean squared deviation), as independent of Welford as possible.
Reference reference_layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& dy) {
  int64_t cols = x.size(-1), rows = x.numel() / cols;
  std::vector<double> xv = x.to_vector<double>(), w = weight.to_vector<double>(), dyv = dy.to_vector<double>();
  std::vector<double> b = bias.defined() ? bias.to_vector<double>() : std::vector<double>(size_t(cols), 0.0);
  Reference ref{std::vector<double>(xv.size()), std::vector<double>(size_t(rows)), std::vector<double>(size_t(rows)),
                std::vector<double>(xv.size()), std::vector<double>(size_t(cols), 0.0),
                std::vector<double>(size_t(cols), 0.0)};
  for (int64_t r = 0; r < rows; ++r) {
    auto at = [&](const std::vector<double>& v, int64_t c) { return v[size_t(r * cols + c)]; };
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += at(xv, c) / double(cols);
    for (int64_t c = 0; c < cols; ++c) var += (at(xv, c) - mean) * (at(xv, c) - mean) / double(cols);
    double rstd = 1 / std::sqrt(var + kEps);
    ref.mean[size_t(r)] = mean;
    ref.rstd[size_t(r)] = rstd;
    double mean_g = 0, mean_g_xhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      double xhat = (at(xv, c) - mean) * rstd, g = at(dyv, c) * w[size_t(c)];
      ref.y[size_t(r * cols + c)] = xhat * w[size_t(c)] + b[size_t(c)];
      mean_g += g / double(cols);
      mean_g_xhat += g * xhat / double(cols);
      ref.dweight[size_t(c)] += at(dyv, c) * xhat;
      ref.dbias[size_t(c)] += at(dyv, c);
    }
    for (int64_t c = 0; c < cols; ++c) {
      double xhat = (at(xv, c) - mean) * rstd;
      ref.dx[size_t(r * cols + c)] = rstd * (at(dyv, c) * w[size_t(c)] - mean_g - xhat * mean_g_xhat);
    }
  }
  return ref;
}

// Element counts of test::kSizes, then odd shapes.
const Shape kShapes[] = {{1, 1}, {4, 16}, {64, 64}, {256, 256}, {7, 13}, {3, 5, 11}};

class LayerNormKernel : public ::testing::TestWithParam<std::tuple<Shape, DType, bool>> {};

TEST_P(LayerNormKernel, ForwardAndBackwardMatchF64Loops) {
  const auto& param = GetParam();
  const auto shape = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  const auto with_bias = std::get<2>(param);
  int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
  DType acc = accumulation_dtype(dtype);
  Tensor x = random(shape, dtype, -2.0, 3.0), weight = random({cols}, dtype, 0.5, 1.5), dy = random(shape, dtype);
  Tensor bias = with_bias ? random({cols}, dtype) : Tensor();
  Reference ref = reference_layernorm(x, weight, bias, dy);
  Tensor ref_mean = Tensor::from_vector(ref.mean, {rows}).to(acc), ref_rstd = Tensor::from_vector(ref.rstd, {rows}).to(acc);

  ops::dispatch_cpu_float("test", x, [&]<class T>() {
    using A = acc_t<T>;
    Tensor y = test::poisoned(shape, dtype), mean = test::poisoned({rows}, acc), rstd = test::poisoned({rows}, acc);
    kernels::cpu::layernorm(kernels::LayerNormArgs<T>{x.data<T>(), weight.data<T>(),
                                                      with_bias ? bias.data<T>() : nullptr, y.data<T>(),
                                                      mean.data<A>(), rstd.data<A>(), rows, cols, A(kEps)});
    EXPECT_TRUE(all_close(y, Tensor::from_vector(ref.y, shape), "layernorm"));
    EXPECT_TRUE(all_close(mean, Tensor::from_vector(ref.mean, {rows}), "layernorm"));
    EXPECT_TRUE(all_close(rstd, Tensor::from_vector(ref.rstd, {rows}), "layernorm"));

    Tensor dx = test::poisoned(shape, dtype), dweight = test::poisoned({cols}, acc),
           dbias = test::poisoned({cols}, acc);
    kernels::cpu::layernorm_backward(kernels::LayerNormBackwardArgs<T>{
        dy.data<T>(), x.data<T>(), weight.data<T>(), ref_mean.data<A>(), ref_rstd.data<A>(), dx.data<T>(), false,
        dweight.data<A>(), dbias.data<A>(), rows, cols});
    EXPECT_TRUE(all_close(dx, Tensor::from_vector(ref.dx, shape), "layernorm"));
    EXPECT_TRUE(all_close(dweight, Tensor::from_vector(ref.dweight, {cols}), "layernorm"));
    EXPECT_TRUE(all_close(dbias, Tensor::from_vector(ref.dbias, {cols}), "layernorm"));
  });
}

INSTANTIATE_TEST_SUITE_P(AllShapes, LayerNormKernel,
                         ::testing::Combine(::testing::ValuesIn(kShapes), ::testing::Values(DType::f32, DType::f64),
                                            ::testing::Bool()));

TEST(LayerNorm, OpsOnStridedInputWithPartialGradients) {
  Tensor x = random({3, 11, 5}, DType::f64).transpose(1, 2);  // (3, 5, 11), not contiguous
  Tensor weight = random({11}, DType::f64), bias = random({11}, DType::f64), dy = random({3, 5, 11}, DType::f64);
  Reference ref = reference_layernorm(x, weight, bias, dy);
  ops::LayerNormOutput out = ops::layernorm(x, weight, bias, kEps);
  EXPECT_TRUE(all_close(out.y, Tensor::from_vector(ref.y, {3, 5, 11}), "layernorm"));
  EXPECT_TRUE(all_close(out.rstd, Tensor::from_vector(ref.rstd, {15}), "layernorm"));

  ops::LayerNormGrads only_dx = ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, true, false, false);
  EXPECT_TRUE(all_close(only_dx.dx, Tensor::from_vector(ref.dx, {3, 5, 11}), "layernorm"));
  EXPECT_FALSE(only_dx.dweight.defined());
  EXPECT_FALSE(only_dx.dbias.defined());
  ops::LayerNormGrads params = ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, false, true, true);
  EXPECT_FALSE(params.dx.defined());
  EXPECT_TRUE(all_close(params.dweight, Tensor::from_vector(ref.dweight, {11}), "layernorm"));
  EXPECT_TRUE(all_close(params.dbias, Tensor::from_vector(ref.dbias, {11}), "layernorm"));
}

TEST(LayerNorm, ParameterGradientsIdenticalAcrossThreadCounts) {
  Tensor x = random({5000, 24}), weight = random({24}), dy = random({5000, 24});
  ops::LayerNormOutput out = ops::layernorm(x, weight, Tensor(), kEps);
  auto grads = [&] { return ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, false, true, true); };
  ops::LayerNormGrads first = grads();
  int saved_threads = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    ops::LayerNormGrads again = grads();
    EXPECT_EQ(again.dweight.to_vector<float>(), first.dweight.to_vector<float>());
    EXPECT_EQ(again.dbias.to_vector<float>(), first.dbias.to_vector<float>());
  }
  omp_set_num_threads(saved_threads);
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  Tensor x = random({2, 3, 5}, DType::f64), weight = random({5}, DType::f64), bias = random({5}, DType::f64);
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::layernorm(v[0], v[1], v[2], kEps); },
                              {x, weight, bias}));
  EXPECT_TRUE(test::gradcheck(
      [](const auto& v) { return autograd::layernorm(v[0], v[1], autograd::Variable(), kEps); }, {x, weight}));
}

TEST(LayerNorm, BadInputsRaise) {
  Tensor x = random({2, 3, 4}), weight = random({4});
  EXPECT_ALPHA_ERROR(ops::layernorm(x, random({3}), Tensor(), kEps), ShapeError, "[layernorm]", "'weight'", "[4]",
                     "[3]");
  EXPECT_ALPHA_ERROR(ops::layernorm(x, weight, random({5}), kEps), ShapeError, "[layernorm]", "'bias'", "[4]", "[5]");
  EXPECT_ALPHA_ERROR(ops::layernorm(x, random({4}, DType::f64), Tensor(), kEps), DTypeError, "[layernorm]",
                     "'weight'", "f32", "f64");
  EXPECT_ALPHA_ERROR(ops::layernorm(x, weight, random({4}, DType::f64), kEps), DTypeError, "[layernorm]", "'bias'");
  EXPECT_ALPHA_ERROR(ops::layernorm(Tensor::zeros({2, 4}, DType::i32), weight, Tensor(), kEps), DTypeError,
                     "[layernorm]", "'x'", "i32");
  EXPECT_ALPHA_ERROR(ops::layernorm(Tensor(), weight, Tensor(), kEps), ValueError, "[layernorm]", "'x'", "undefined");
  EXPECT_ALPHA_ERROR(ops::layernorm(x, weight, Tensor(), 0.0), ValueError, "[layernorm]", "'eps'", "positive");

  ops::LayerNormOutput out = ops::layernorm(x, weight, Tensor(), kEps);
  Tensor dy = random({2, 3, 4});
  EXPECT_ALPHA_ERROR(ops::layernorm_backward(random({2, 3, 5}), x, weight, out.mean, out.rstd, true, true, true),
                     ShapeError, "[layernorm_backward]", "'dy'", "[2, 3, 4]", "[2, 3, 5]");
  EXPECT_ALPHA_ERROR(ops::layernorm_backward(dy, x, weight, out.mean.to(DType::f64), out.rstd, true, true, true),
                     DTypeError, "[layernorm_backward]", "'mean'", "f32", "f64");
  EXPECT_ALPHA_ERROR(ops::layernorm_backward(dy, x, weight, out.mean, random({5}), true, true, true), ShapeError,
                     "[layernorm_backward]", "'rstd'", "[6]", "[5]");
  EXPECT_ALPHA_ERROR(ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, true, false, false, random({2, 3})),
                     ShapeError, "[layernorm_backward]", "'add_dx_into'", "[2, 3, 4]");
  EXPECT_ALPHA_ERROR(
      ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, true, false, false, random({2, 3, 4}, DType::f64)),
      DTypeError, "[layernorm_backward]", "'add_dx_into'");
  EXPECT_ALPHA_ERROR(
      ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, true, false, false, random({4, 3, 2}).transpose(0, 2)),
      LayoutError, "[layernorm_backward]", "'add_dx_into'");
}

// dx added into a given gradient (the residual stream's, autograd::gradient_accumulator): the sum of that
// gradient and the plain dx, rounded once, which in f32 and f64 (dx computed in the dtype itself) is the same
// bits as adding the plain dx afterwards; the given tensor is the one returned.
TEST(LayerNorm, BackwardAddsDxIntoAGivenGradient) {
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Tensor x = random({3, 7, 10}, dtype), weight = random({10}, dtype), dy = random({3, 7, 10}, dtype);
    ops::LayerNormOutput out = ops::layernorm(x, weight, Tensor(), kEps);
    ops::LayerNormGrads plain = ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, true, true, true);
    Tensor earlier = random({3, 7, 10}, dtype), into = earlier.clone();
    ops::LayerNormGrads added = ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, true, true, true, into);
    EXPECT_TRUE(added.dx.shares_storage(into));
    EXPECT_TRUE(test::bit_equal(added.dx, ops::add(earlier, plain.dx)));
    EXPECT_TRUE(test::bit_equal(added.dweight, plain.dweight));
    // Without need_dx the given tensor is left alone.
    ops::LayerNormGrads no_dx = ops::layernorm_backward(dy, x, weight, out.mean, out.rstd, false, true, false, into);
    EXPECT_FALSE(no_dx.dx.defined());
    EXPECT_TRUE(test::bit_equal(into, added.dx));
  }
}

}  // namespace
}  // namespace alpha
