// Activations against naive f64 loops: GELU, softcap and softmax forward and backward kernels directly
// (into poisoned outputs), the tensor ops on strided input, softmax's max subtraction on large logits,
// gradient checks through autograd, and bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/activation.h"
#include "alpha/ops/activation.h"
#include "alpha/ops/check.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;

constexpr double kCap = 3.0;

double reference_gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Derivative of the tanh-form GELU by the product and chain rules, written out independently of the kernel.
double reference_gelu_grad(double x) {
  double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  double sech2 = 1 / (std::cosh(u) * std::cosh(u));
  return 0.5 * (1 + std::tanh(u)) + 0.5 * x * sech2 * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// Applies f to every element pair of (a, b) as f64; shaped like a.
Tensor map_f64(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), out(av.size());
  for (size_t i = 0; i < av.size(); ++i) out[i] = f(av[i], bv[i]);
  return Tensor::from_vector(out, a.shape());
}

Tensor reference_softmax(const Tensor& x) {
  int64_t cols = x.size(-1), rows = x.numel() / cols;
  std::vector<double> xv = x.to_vector<double>(), y(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (int64_t c = 0; c < cols; ++c) total += std::exp(xv[size_t(r * cols + c)]);
    for (int64_t c = 0; c < cols; ++c) y[size_t(r * cols + c)] = std::exp(xv[size_t(r * cols + c)]) / total;
  }
  return Tensor::from_vector(y, x.shape());
}

// dx = y·(dy − Σ_c dy·y) per row, from the Jacobian diag(y) − y·yᵀ.
Tensor reference_softmax_backward(const Tensor& dy, const Tensor& y) {
  int64_t cols = y.size(-1), rows = y.numel() / cols;
  std::vector<double> dyv = dy.to_vector<double>(), yv = y.to_vector<double>(), dx(yv.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) {
      double s = 0;
      for (int64_t j = 0; j < cols; ++j)
        s += dyv[size_t(r * cols + j)] * yv[size_t(r * cols + j)] * ((i == j ? 1.0 : 0.0) - yv[size_t(r * cols + i)]);
      dx[size_t(r * cols + i)] = s;
    }
  return Tensor::from_vector(dx, y.shape());
}

class PointwiseKernels : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {};

TEST_P(PointwiseKernels, MatchF64Loops) {
  const auto& param = GetParam();
  const auto n = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  Tensor x = random({n}, dtype, -4.0, 4.0), dy = random({n}, dtype);
  Tensor capped = random({n}, dtype, -0.99 * kCap, 0.99 * kCap);  // a softcap output, inside (−cap, cap)
  Tensor want_gelu = map_f64(x, x, [](double v, double) { return reference_gelu(v); });
  Tensor want_gelu_dx = map_f64(x, dy, [](double v, double g) { return g * reference_gelu_grad(v); });
  Tensor wide = random({n}, dtype, -10.0, 10.0);
  Tensor want_softcap = map_f64(wide, wide, [](double v, double) { return kCap * std::tanh(v / kCap); });
  Tensor want_softcap_dx = map_f64(capped, dy, [](double y, double g) { return g * (1 - (y / kCap) * (y / kCap)); });

  ops::dispatch_cpu_float("test", x, [&]<class T>() {
    Tensor out = test::poisoned({n}, dtype);
    kernels::cpu::gelu(kernels::GeluArgs<T>{x.data<T>(), out.data<T>(), n});
    EXPECT_TRUE(all_close(out, want_gelu, "activation"));
    out = test::poisoned({n}, dtype);
    kernels::cpu::gelu_backward(kernels::GeluBackwardArgs<T>{dy.data<T>(), x.data<T>(), out.data<T>(), n});
    EXPECT_TRUE(all_close(out, want_gelu_dx, "activation"));
    out = test::poisoned({n}, dtype);
    kernels::cpu::softcap(kernels::SoftcapArgs<T>{wide.data<T>(), out.data<T>(), acc_t<T>(kCap), n});
    EXPECT_TRUE(all_close(out, want_softcap, "activation"));
    out = test::poisoned({n}, dtype);
    kernels::cpu::softcap_backward(
        kernels::SoftcapBackwardArgs<T>{dy.data<T>(), capped.data<T>(), out.data<T>(), acc_t<T>(kCap), n});
    EXPECT_TRUE(all_close(out, want_softcap_dx, "activation"));
  });
}

INSTANTIATE_TEST_SUITE_P(AllSizes, PointwiseKernels,
                         ::testing::Combine(::testing::ValuesIn(test::kSizes),
                                            ::testing::Values(DType::f32, DType::f64)));

class SoftmaxKernel : public ::testing::TestWithParam<std::tuple<Shape, DType>> {};

TEST_P(SoftmaxKernel, ForwardAndBackwardMatchF64Loops) {
  const auto& param = GetParam();
  const auto shape = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
  Tensor x = random(shape, dtype, -5.0, 5.0), dy = random(shape, dtype);
  Tensor want_y = reference_softmax(x);
  Tensor y_in = want_y.to(dtype);  // the backward is fed the reference output, so it is tested on its own
  Tensor want_dx = reference_softmax_backward(dy, y_in);
  ops::dispatch_cpu_float("test", x, [&]<class T>() {
    Tensor y = test::poisoned(shape, dtype);
    kernels::cpu::softmax(kernels::SoftmaxArgs<T>{x.data<T>(), y.data<T>(), rows, cols});
    EXPECT_TRUE(all_close(y, want_y, "softmax"));
    Tensor dx = test::poisoned(shape, dtype);
    kernels::cpu::softmax_backward(
        kernels::SoftmaxBackwardArgs<T>{dy.data<T>(), y_in.data<T>(), dx.data<T>(), rows, cols});
    EXPECT_TRUE(all_close(dx, want_dx, "softmax"));
  });
}

// Element counts of test::kSizes (one long row among them), then odd shapes.
INSTANTIATE_TEST_SUITE_P(AllShapes, SoftmaxKernel,
                         ::testing::Combine(::testing::Values(Shape{1, 1}, Shape{4, 16}, Shape{1, 4096},
                                                              Shape{256, 256}, Shape{7, 13}, Shape{3, 5, 11}),
                                            ::testing::Values(DType::f32, DType::f64)));

TEST(Activation, OpsOnStridedInput) {
  Tensor x = random({3, 11, 5}, DType::f64, -3.0, 3.0).transpose(1, 2);  // (3, 5, 11), not contiguous
  Tensor dy = random({3, 5, 11}, DType::f64);
  EXPECT_TRUE(all_close(ops::gelu(x), map_f64(x, x, [](double v, double) { return reference_gelu(v); }),
                        "activation"));
  EXPECT_TRUE(all_close(ops::gelu_backward(dy, x),
                        map_f64(x, dy, [](double v, double g) { return g * reference_gelu_grad(v); }), "activation"));
  Tensor capped = ops::softcap(x, kCap);
  EXPECT_TRUE(all_close(capped, map_f64(x, x, [](double v, double) { return kCap * std::tanh(v / kCap); }),
                        "activation"));
  EXPECT_TRUE(all_close(ops::softcap_backward(dy, capped, kCap),
                        map_f64(x, dy, [](double v, double g) { return g / std::pow(std::cosh(v / kCap), 2); }),
                        "activation"));
  Tensor y = ops::softmax(x);
  EXPECT_TRUE(all_close(y, reference_softmax(x), "softmax"));
  EXPECT_TRUE(all_close(ops::softmax_backward(dy, y), reference_softmax_backward(dy, y), "softmax"));
}

TEST(Activation, SoftmaxOfLargeLogitsStaysFinite) {
  // exp(1000) overflows; after subtracting the row maximum every exponent is <= 0.
  Tensor x = Tensor::from_vector<float>({1000, 1001, 999, -1000, -1001, -999}, {2, 3});
  Tensor shifted = Tensor::from_vector<double>({0, 1, -1, 0, -1, 1}, {2, 3});
  EXPECT_TRUE(all_close(ops::softmax(x), reference_softmax(shifted), "softmax"));
}

TEST(Activation, GradientsMatchFiniteDifferences) {
  Tensor x = random({3, 7}, DType::f64, -3.0, 3.0);
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::gelu(v[0]); }, {x}));
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::softcap(v[0], kCap); }, {x}));
  EXPECT_TRUE(test::gradcheck([](const auto& v) { return autograd::softmax(v[0]); }, {x}));
}

TEST(Activation, BadInputsRaise) {
  Tensor x = random({2, 3});
  EXPECT_ALPHA_ERROR(ops::gelu(Tensor::zeros({2, 3}, DType::i32)), DTypeError, "[gelu]", "'x'", "i32");
  EXPECT_ALPHA_ERROR(ops::gelu(Tensor()), ValueError, "[gelu]", "'x'", "undefined");
  EXPECT_ALPHA_ERROR(ops::gelu_backward(random({3, 2}), x), ShapeError, "[gelu_backward]", "'dy'", "[2, 3]", "[3, 2]");
  EXPECT_ALPHA_ERROR(ops::gelu_backward(random({2, 3}, DType::f64), x), DTypeError, "[gelu_backward]", "'dy'", "f64");
  EXPECT_ALPHA_ERROR(ops::softcap(x, 0.0), ValueError, "[softcap]", "'cap'", "positive");
  EXPECT_ALPHA_ERROR(ops::softcap_backward(x, x, -1.0), ValueError, "[softcap_backward]", "'cap'", "positive");
  EXPECT_ALPHA_ERROR(ops::softcap_backward(random({2, 4}), x, kCap), ShapeError, "[softcap_backward]", "'dy'");
  EXPECT_ALPHA_ERROR(ops::softmax(Tensor::full({}, 1.0, DType::f32)), ShapeError, "[softmax]", "'x'", "at least 1");
  EXPECT_ALPHA_ERROR(ops::softmax(Tensor::zeros({4}, DType::u8)), DTypeError, "[softmax]", "'x'", "u8");
  EXPECT_ALPHA_ERROR(ops::softmax_backward(x, Tensor()), ValueError, "[softmax_backward]", "'y'", "undefined");
  EXPECT_ALPHA_ERROR(ops::softmax_backward(random({2, 3}, DType::f64), x), DTypeError, "[softmax_backward]", "'dy'");
}

}  // namespace
}  // namespace alpha
