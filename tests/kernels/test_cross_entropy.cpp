// Fused softmax cross-entropy against naive f64 loops: kernels called directly into poisoned outputs,
// ignored rows, odd shapes through the ops, numerical stability, a deterministic mean, a gradient
// check, and bad targets.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/cross_entropy.h"
#include "alpha/ops/activation.h"
#include "alpha/ops/check.h"
#include "alpha/ops/cross_entropy.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/linear_cross_entropy.h"
#include "alpha/ops/matmul.h"
#include "kernels/kernel_helpers.h"
#include "support/checks.h"

namespace alpha {
namespace {

using ops::kIgnoreIndex;
using test::all_close;
using test::random;

struct NaiveCrossEntropy {
  Tensor lse;       // [N] f64
  double loss = 0;
  int64_t counted = 0;
  Tensor dlogits;   // logits' shape, f64, for dloss
};

NaiveCrossEntropy naive_cross_entropy(const Tensor& logits, const Tensor& targets, double dloss) {
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  std::vector<double> x = logits.contiguous().to_vector<double>();
  std::vector<int32_t> t = targets.contiguous().to_vector<int32_t>();
  std::vector<double> lse(static_cast<size_t>(N)), grad(x.size(), 0.0);
  NaiveCrossEntropy r;
  for (int64_t i = 0; i < N; ++i) {
    double max = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) max = std::max(max, x[size_t(i * V + j)]);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[size_t(i * V + j)] - max);
    lse[size_t(i)] = max + std::log(sum);
    if (t[size_t(i)] == kIgnoreIndex) continue;
    r.loss += lse[size_t(i)] - x[size_t(i * V + t[size_t(i)])];
    ++r.counted;
  }
  if (r.counted > 0) r.loss /= double(r.counted);
  for (int64_t i = 0; i < N && r.counted > 0; ++i) {
    if (t[size_t(i)] == kIgnoreIndex) continue;
    for (int64_t j = 0; j < V; ++j) {
      double p = std::exp(x[size_t(i * V + j)] - lse[size_t(i)]);
      grad[size_t(i * V + j)] = dloss * (p - (j == t[size_t(i)] ? 1.0 : 0.0)) / double(r.counted);
    }
  }
  r.lse = Tensor::from_vector(lse, {N});
  r.dlogits = Tensor::from_vector(grad, logits.shape());
  return r;
}

// Targets in [0, V) with every third row ignored (when there is more than one row).
Tensor random_targets(int64_t rows, int32_t vocab) {
  Tensor t = test::random_indices({rows}, vocab);
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 1; i < rows; i += 3) p[i] = kIgnoreIndex;
  return t;
}

Tensor scalar(double value) { return Tensor::from_vector<double>({value}, {}); }

class CrossEntropySizes : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {};

TEST_P(CrossEntropySizes, KernelsMatchF64Loops) {
  const auto& param = GetParam();
  const auto n = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  // n logits as N rows of V classes.
  const int64_t V = n == 1 ? 1 : n == 64 ? 16 : n == 4096 ? 64 : 512, N = n / V;
  Tensor logits = random({N, V}, dtype, -4.0, 4.0);
  Tensor targets = random_targets(N, int32_t(V));
  const double dloss = 0.75;
  NaiveCrossEntropy want = naive_cross_entropy(logits, targets, dloss);
  ops::dispatch_cpu_float("test", logits, [&]<class T>() {
    using A = acc_t<T>;
    Tensor lse = test::poisoned({N}, dtype_of<A>);
    A loss = std::numeric_limits<A>::quiet_NaN();
    int64_t counted = -1;
    kernels::cpu::cross_entropy(kernels::CrossEntropyArgs<T>{logits.data<T>(), targets.data<int32_t>(),
                                                             lse.data<A>(), &loss, &counted, N, V, kIgnoreIndex});
    EXPECT_TRUE(all_close(lse, want.lse, "cross_entropy"));
    EXPECT_TRUE(all_close(scalar(double(loss)).to(dtype), scalar(want.loss), "cross_entropy"));
    EXPECT_EQ(counted, want.counted);
    Tensor dlogits = test::poisoned({N, V}, dtype);
    kernels::cpu::cross_entropy_backward(kernels::CrossEntropyBackwardArgs<T>{
        logits.data<T>(), targets.data<int32_t>(), lse.data<A>(), dlogits.data<T>(), A(dloss / double(counted)), N,
        V, kIgnoreIndex, nullptr, nullptr});
    EXPECT_TRUE(all_close(dlogits, want.dlogits, "cross_entropy"));
    // Both at once, into poisoned outputs and then over the logits themselves: the same bits as the two
    // kernels (the same formulas, one row at a time).
    const A scale = A(dloss / double(counted));
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(in_place ? "in place" : "into a separate gradient");
      Tensor source = logits.clone();
      Tensor fused_lse = test::poisoned({N}, dtype_of<A>);
      Tensor fused_dlogits = in_place ? source : test::poisoned({N, V}, dtype);
      A fused_loss = std::numeric_limits<A>::quiet_NaN();
      int64_t fused_counted = -1;
      const kernels::CrossEntropyWithGradArgs<T> args{{source.data<T>(), targets.data<int32_t>(), fused_lse.data<A>(),
                                                       &fused_loss, &fused_counted, N, V, kIgnoreIndex},
                                                      fused_dlogits.data<T>(),
                                                      scale};
      kernels::cpu::cross_entropy_with_grad(args);
      EXPECT_TRUE(test::bit_equal(fused_lse, lse));
      EXPECT_TRUE(test::bit_equal(fused_dlogits, dlogits));
      EXPECT_EQ(fused_loss, loss);
      EXPECT_EQ(fused_counted, counted);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllSizes, CrossEntropySizes,
                         ::testing::Combine(::testing::ValuesIn(test::kSizes),
                                            ::testing::Values(DType::f32, DType::f64)));

TEST(CrossEntropy, OpsOnOddShapes) {
  for (DType dtype : {DType::f32, DType::f64}) {
    // [3, 5, 11] logits with [3, 5] targets, and [7, 13] with flat targets.
    Tensor logits = random({3, 5, 11}, dtype, -3.0, 3.0);
    Tensor targets = random_targets(15, 11).reshape({3, 5});
    NaiveCrossEntropy want = naive_cross_entropy(logits, targets, -1.5);
    ops::CrossEntropyOutput got = ops::cross_entropy(logits, targets);
    EXPECT_TRUE(all_close(got.loss, scalar(want.loss), "cross_entropy"));
    EXPECT_TRUE(all_close(got.lse, want.lse, "cross_entropy"));
    EXPECT_EQ(got.counted_rows, want.counted);
    EXPECT_TRUE(all_close(ops::cross_entropy_backward(-1.5, logits, targets, got.lse, got.counted_rows),
                          want.dlogits, "cross_entropy"));
    Tensor logits2 = random({13, 7}, dtype).transpose(0, 1);  // non-contiguous: [7, 13]
    Tensor targets2 = random_targets(7, 13);
    EXPECT_TRUE(all_close(ops::cross_entropy(logits2, targets2).loss,
                          scalar(naive_cross_entropy(logits2, targets2, 1.0).loss), "cross_entropy"));
  }
}

TEST(CrossEntropy, LargeLogitsStayFinite) {
  // Logits beyond exp's overflow (88 in f32, 709 in f64): without the max shift Σ exp is inf.
  for (auto [dtype, big] : {std::pair{DType::f32, 100.0}, std::pair{DType::f64, 1000.0}}) {
    Tensor logits =
        Tensor::from_vector<double>({big, big - 1, -big, big - 2, big, big + 1}, {2, 3}).to(dtype);
    Tensor targets = Tensor::from_vector<int32_t>({1, 2}, {2});
    ops::CrossEntropyOutput got = ops::cross_entropy(logits, targets);
    NaiveCrossEntropy want = naive_cross_entropy(logits, targets, 1.0);
    EXPECT_TRUE(all_close(got.loss, scalar(want.loss), "cross_entropy"));
    EXPECT_TRUE(all_close(ops::cross_entropy_backward(1.0, logits, targets, got.lse, got.counted_rows),
                          want.dlogits, "cross_entropy"));
  }
}

TEST(CrossEntropy, AllRowsIgnoredGiveZeroLossAndGradient) {
  Tensor logits = random({4, 6});
  Tensor targets = Tensor::full({4}, kIgnoreIndex, DType::i32);
  ops::CrossEntropyOutput got = ops::cross_entropy(logits, targets);
  EXPECT_EQ(got.counted_rows, 0);
  EXPECT_EQ(got.loss.item(), 0.0);
  Tensor grad = ops::cross_entropy_backward(1.0, logits, targets, got.lse, 0);
  EXPECT_TRUE(all_close(grad, Tensor::zeros({4, 6}, DType::f64), "cross_entropy"));
}

TEST(CrossEntropy, MeanIsIdenticalAcrossThreadCounts) {
  // 20000 rows span several reduction blocks.
  test::ThreadCountGuard restore;
  Tensor logits = random({20000, 3}, DType::f32, -5.0, 5.0);
  Tensor targets = random_targets(20000, 3);
  omp_set_num_threads(1);
  float one = ops::cross_entropy(logits, targets).loss.data<float>()[0];
  omp_set_num_threads(3);
  float three = ops::cross_entropy(logits, targets).loss.data<float>()[0];
  EXPECT_EQ(std::memcmp(&one, &three, sizeof one), 0) << one << " vs " << three;
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  Tensor targets = Tensor::from_vector<int32_t>({2, kIgnoreIndex, 0, 5}, {4});
  EXPECT_TRUE(test::gradcheck([&](const auto& v) { return autograd::cross_entropy(v[0], targets); },
                              {random({4, 6}, DType::f64, -2.0, 2.0)}));
  Tensor targets3d = Tensor::from_vector<int32_t>({1, 0, 3, 3, kIgnoreIndex, 2}, {2, 3});
  EXPECT_TRUE(test::gradcheck([&](const auto& v) { return autograd::cross_entropy(v[0], targets3d); },
                              {random({2, 3, 5}, DType::f64, -2.0, 2.0)}));
}

TEST(CrossEntropy, GradientFactorReadFromMemory) {
  // counted_rows_device and dloss_device (the forward's count and the loss gradient, where the kernel runs)
  // give the same bits as the factor computed by the caller; a count of 0 gives a zero gradient.
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor logits = random({7, 9}, dtype, -3.0, 3.0);
    Tensor targets = random_targets(7, 9);
    ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets);
    EXPECT_EQ(out.counted.dtype(), DType::i64);
    EXPECT_EQ(out.counted.item(), double(out.counted_rows));
    Tensor host = ops::cross_entropy_backward(-1.25, logits, targets, out.lse, out.counted_rows);
    Tensor dloss = Tensor::full({}, -1.25, dtype);
    Tensor from_memory = ops::cross_entropy_backward(dloss, logits, targets, out.lse, out.counted);
    EXPECT_EQ(host.to_vector<double>(), from_memory.to_vector<double>());
    // From the forward's own output (its validated targets): the same bits.
    EXPECT_EQ(ops::cross_entropy_backward(dloss, logits, out).to_vector<double>(), host.to_vector<double>());
    Tensor none = Tensor::zeros({}, DType::i64);
    EXPECT_TRUE(all_close(ops::cross_entropy_backward(dloss, logits, targets, out.lse, none),
                          Tensor::zeros({7, 9}, DType::f64), "cross_entropy"));
  }
}

TEST(CrossEntropy, BackwardFromAForwardOfOtherLogitsRaises) {
  Tensor logits = random({7, 9}, DType::f32, -3.0, 3.0);
  ops::CrossEntropyOutput out = ops::cross_entropy(logits, random_targets(7, 9));
  Tensor dloss = Tensor::full({}, 1.0, DType::f32);
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(dloss, random({5, 9}, DType::f32), out), ShapeError,
                     "[cross_entropy_backward]", "'forward.targets'", "[5]", "[7]");
  ops::CrossEntropyOutput empty;
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(dloss, logits, empty), ValueError, "[cross_entropy_backward]",
                     "'forward.targets'", "a defined tensor");
}

TEST(CrossEntropy, BadInputsRaise) {
  Tensor logits = random({4, 6});
  EXPECT_ALPHA_ERROR(ops::cross_entropy(logits, Tensor::from_vector<int32_t>({0, 5, 6, 1}, {4})), ValueError,
                     "[cross_entropy]", "'targets'", "[0, 6)", "got 6", "row 2");
  EXPECT_ALPHA_ERROR(ops::cross_entropy(logits, Tensor::from_vector<int32_t>({0, -2, 1, 1}, {4})), ValueError,
                     "[cross_entropy]", "'targets'", "got -2", "row 1");
  EXPECT_ALPHA_ERROR(ops::cross_entropy(logits, random({4})), DTypeError, "[cross_entropy]", "'targets'", "i32");
  EXPECT_ALPHA_ERROR(ops::cross_entropy(logits, test::random_indices({5}, 6)), ShapeError, "[cross_entropy]",
                     "'targets'", "[4]", "[5]");
  EXPECT_ALPHA_ERROR(ops::cross_entropy(Tensor::zeros({4, 6}, DType::i32), test::random_indices({4}, 6)),
                     DTypeError, "[cross_entropy]", "'logits'", "i32");
  Tensor targets = test::random_indices({4}, 6);
  ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets);
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(1.0, logits, targets, random({3}), 4), ShapeError,
                     "[cross_entropy_backward]", "'lse'", "[4]", "[3]");
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(1.0, logits, targets, out.lse, 5), ValueError,
                     "[cross_entropy_backward]", "'counted_rows'", "got 5");
  Tensor dloss = Tensor::full({}, 1.0, DType::f32);
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(dloss, logits, targets, out.lse, out.lse), DTypeError,
                     "[cross_entropy_backward]", "'counted_rows'", "i64", "f32");
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(Tensor::full({2}, 1.0, DType::f32), logits, targets, out.lse,
                                                 out.counted),
                     ShapeError, "[cross_entropy_backward]", "'dloss'", "one element", "[2]");
  EXPECT_ALPHA_ERROR(ops::cross_entropy_backward(Tensor::full({}, 1.0, DType::f64), logits, targets, out.lse,
                                                 out.counted),
                     DTypeError, "[cross_entropy_backward]", "'dloss'", "f32", "f64");
}

// The fused head and loss against linear then cross-entropy in f64 (naive loops for the loss and dlogits,
// linear_backward for the rest): x, weight, bias and targets fresh, a third of the rows ignored.
struct HeadCase {
  Tensor x, weight, bias, targets;
};
HeadCase random_head_case(Shape x_shape, int64_t vocab, DType dtype) {
  const int64_t features = x_shape.back(), rows = shape_numel(x_shape) / features;
  Shape target_shape(x_shape.begin(), x_shape.end() - 1);
  return {random(x_shape, dtype, -2.0, 2.0), random({vocab, features}, dtype, -0.5, 0.5),
          random({vocab}, dtype, -1.0, 1.0), random_targets(rows, int32_t(vocab)).reshape(target_shape)};
}

void expect_head_matches_f64(const HeadCase& c, const ops::LinearCrossEntropy& got, DType dtype, double cap = 0.0) {
  const int64_t features = c.x.size(-1), rows = c.x.numel() / features;
  const Tensor x = c.x.to(DType::f64).reshape({rows, features}), weight = c.weight.to(DType::f64);
  Tensor logits = ops::linear(x, weight, c.bias.to(DType::f64));
  if (cap > 0) logits = ops::softcap(logits, cap);
  NaiveCrossEntropy want = naive_cross_entropy(logits, c.targets.reshape({rows}), 1.0);
  const Tensor dlogits = cap > 0 ? ops::softcap_backward(want.dlogits, logits, cap) : want.dlogits;
  ops::LinearGrads grads = ops::linear_backward(dlogits, x, weight, true, true, true);
  const test::Tolerance tol = test::tolerance("linear_cross_entropy", dtype);
  EXPECT_NEAR(got.loss.item(), want.loss, tol.abs + tol.rel * std::abs(want.loss));
  EXPECT_TRUE(all_close(got.dx.to(DType::f64).reshape({rows, features}), grads.dx, tol));
  EXPECT_TRUE(all_close(got.dweight.to(DType::f64), grads.dweight, tol));
  EXPECT_TRUE(all_close(got.dbias.to(DType::f64), grads.dbias, tol));
}

class LinearCrossEntropyDtypes : public ::testing::TestWithParam<DType> {};

TEST_P(LinearCrossEntropyDtypes, MatchesLinearThenCrossEntropyForEveryChunking) {
  const DType dtype = GetParam();
  const int64_t vocab = 29, row_bytes = vocab * int64_t(dtype_size(dtype));
  HeadCase c = random_head_case({37, 13}, vocab, dtype);
  // One row per chunk, 5 rows (8 chunks, the last of 2), and the default (one chunk); dW and db rounded to
  // x's dtype or not (wide_param_grads: on the CPU, whose x is f32 or f64, the same dtype, but one chunk's then
  // come from linear_param_grads_into).
  for (size_t chunk_bytes : {size_t(1), size_t(5 * row_bytes), ops::kLinearCrossEntropyChunkBytes})
    for (bool wide : {false, true}) {
      SCOPED_TRACE("chunk_bytes " + std::to_string(chunk_bytes) + (wide ? ", wide_param_grads" : ""));
      ops::LinearCrossEntropy out = ops::linear_cross_entropy(c.x, c.weight, c.bias, c.targets, true, true, true, 0.0,
                                                              chunk_bytes, wide);
      EXPECT_EQ(out.dweight.dtype(), dtype);
      EXPECT_EQ(out.dbias.dtype(), dtype);
      expect_head_matches_f64(c, out, dtype);
    }
  // A logit softcap, with the logits scaled up so that the cap bends them, over three chunks.
  HeadCase capped = c;
  capped.weight = ops::scale(c.weight, 8.0);
  expect_head_matches_f64(capped,
                          ops::linear_cross_entropy(capped.x, capped.weight, capped.bias, capped.targets, true, true,
                                                    true, 3.0, size_t(13 * row_bytes)),
                          dtype, 3.0);
  // Leading dimensions (B, T) and targets shaped like them.
  HeadCase batched = random_head_case({3, 7, 11}, 17, dtype);
  ops::LinearCrossEntropy out = ops::linear_cross_entropy(batched.x, batched.weight, batched.bias, batched.targets,
                                                          true, true, true, 0.0, size_t(4 * 17 * dtype_size(dtype)));
  EXPECT_EQ(out.dx.shape(), batched.x.shape());
  expect_head_matches_f64(batched, out, dtype);
}

INSTANTIATE_TEST_SUITE_P(CpuFloats, LinearCrossEntropyDtypes, ::testing::Values(DType::f32, DType::f64));

// Targets the caller checked (none ignored): the op reads none back and gives the bits of the op that validated
// them, over one chunk and over 8 (the last shorter), targets on the host or the op's device.
TEST(LinearCrossEntropy, CheckedTargetsGiveTheBitsOfValidatedOnes) {
  const int64_t vocab = 29, row_bytes = vocab * int64_t(sizeof(float));
  HeadCase c = random_head_case({37, 13}, vocab, DType::f32);
  std::vector<int32_t> targets = c.targets.to_vector<int32_t>();
  for (size_t i = 0; i < targets.size(); ++i)
    if (targets[i] == ops::kIgnoreIndex) targets[i] = int32_t(i % size_t(vocab));
  c.targets = Tensor::from_vector(targets, {37});
  for (size_t chunk_bytes : {size_t(5 * row_bytes), ops::kLinearCrossEntropyChunkBytes}) {
    SCOPED_TRACE("chunk_bytes " + std::to_string(chunk_bytes));
    const ops::LinearCrossEntropy want =
        ops::linear_cross_entropy(c.x, c.weight, c.bias, c.targets, true, true, true, 0.0, chunk_bytes);
    const ops::LinearCrossEntropy got =
        ops::linear_cross_entropy(c.x, c.weight, c.bias, c.targets, true, true, true, 0.0, chunk_bytes, false, true);
    EXPECT_TRUE(test::bit_equal(got.loss, want.loss));
    EXPECT_TRUE(test::bit_equal(got.dx, want.dx));
    EXPECT_TRUE(test::bit_equal(got.dweight, want.dweight));
    EXPECT_TRUE(test::bit_equal(got.dbias, want.dbias));
    expect_head_matches_f64(c, got, DType::f32);
  }
}

TEST(LinearCrossEntropy, GivesOnlyTheGradientsAskedFor) {
  HeadCase c = random_head_case({9, 5}, 7, DType::f64);
  ops::LinearCrossEntropy loss_only =
      ops::linear_cross_entropy(c.x, c.weight, Tensor(), c.targets, false, false, false, 0.0, size_t(8));
  EXPECT_FALSE(loss_only.dx.defined() || loss_only.dweight.defined() || loss_only.dbias.defined());
  ops::LinearCrossEntropy weight_only =
      ops::linear_cross_entropy(c.x, c.weight, Tensor(), c.targets, false, true, false, 0.0, size_t(8));
  EXPECT_FALSE(weight_only.dx.defined() || weight_only.dbias.defined());
  EXPECT_DOUBLE_EQ(loss_only.loss.item(), weight_only.loss.item());
  const Tensor logits = ops::linear(c.x, c.weight, Tensor());
  EXPECT_NEAR(loss_only.loss.item(), naive_cross_entropy(logits, c.targets, 1.0).loss, 1e-12);
}

TEST(LinearCrossEntropy, EveryRowIgnoredGivesZeroLossAndGradients) {
  HeadCase c = random_head_case({6, 4}, 5, DType::f32);
  c.targets.fill_(kIgnoreIndex);
  ops::LinearCrossEntropy out = ops::linear_cross_entropy(c.x, c.weight, c.bias, c.targets, true, true, true, 0.0, 40);
  EXPECT_EQ(out.loss.item(), 0.0);
  for (const Tensor& g : {out.dx, out.dweight, out.dbias})
    EXPECT_TRUE(test::bit_equal(g, Tensor::zeros(g.shape(), DType::f32)));
}

TEST(LinearCrossEntropy, AutogradScalesTheGradientsByTheLossGradient) {
  HeadCase c = random_head_case({11, 6}, 9, DType::f64);
  auto grads_of = [&](bool fused) {
    autograd::Variable x(c.x, true), weight(c.weight, true), bias(c.bias, true);
    autograd::Variable loss =
        fused ? autograd::linear_cross_entropy(x, weight, bias, c.targets)
              : autograd::cross_entropy(autograd::linear(x, weight, bias), c.targets);
    autograd::backward(autograd::scale(loss, 2.5));
    return std::vector<Tensor>{loss.value(), x.grad(), weight.grad(), bias.grad()};
  };
  std::vector<Tensor> fused = grads_of(true), composite = grads_of(false);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(all_close(fused[i], composite[i], "linear_cross_entropy"));
}

// Weights in a wider dtype than x (master weights: f64 here, x in f32, as f32 weights under bf16 compute on a
// GPU): the function computes with their f32 values (a parameter's held compute copy), and their gradients come
// back in f64, as casting them first would give them.
TEST(LinearCrossEntropy, AutogradTakesWeightsWiderThanX) {
  HeadCase c = random_head_case({11, 6}, 9, DType::f32);
  const Tensor weight64 = c.weight.to(DType::f64), bias64 = c.bias.to(DType::f64);
  auto grads_of = [&](bool fused) {
    autograd::Variable x(c.x, true), weight(weight64, true), bias(bias64, true);
    autograd::Variable loss =
        fused ? autograd::linear_cross_entropy(x, weight, bias, c.targets)
              : autograd::cross_entropy(
                    autograd::linear(x, autograd::cast(weight, DType::f32), autograd::cast(bias, DType::f32)),
                    c.targets);
    EXPECT_EQ(weight.compute_copy().dtype(), DType::f32) << "the parameter holds its compute copy";
    autograd::backward(autograd::scale(loss, 2.5));
    EXPECT_EQ(weight.grad().dtype(), DType::f64);
    EXPECT_EQ(bias.grad().dtype(), DType::f64);
    return std::vector<Tensor>{loss.value(), x.grad(), weight.grad(), bias.grad()};
  };
  std::vector<Tensor> fused = grads_of(true), composite = grads_of(false);
  for (size_t i = 0; i < fused.size(); ++i)
    EXPECT_TRUE(all_close(fused[i], composite[i], test::tolerance("linear_cross_entropy", DType::f32))) << i;
}

TEST(LinearCrossEntropy, BadInputsRaise) {
  HeadCase c = random_head_case({4, 3}, 5, DType::f32);
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(c.x, c.weight, c.bias, c.targets.slice(0, 0, 3), true, true, true),
                     ShapeError, "[linear_cross_entropy]", "'targets'", "[4]");
  Tensor out_of_range = c.targets.clone();
  out_of_range.data<int32_t>()[2] = 5;
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(c.x, c.weight, c.bias, out_of_range, true, true, true), ValueError,
                     "[linear_cross_entropy]", "'targets'", "5 at row 2");
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(c.x, random({5, 4}), c.bias, c.targets, true, true, true),
                     ShapeError, "[linear_cross_entropy]", "'weight'");
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(c.x, c.weight, random({4}), c.targets, true, true, true), ShapeError,
                     "[linear_cross_entropy]", "'bias'");
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(c.x, c.weight, c.bias, c.targets, true, true, true, 0.0, 0), ValueError,
                     "[linear_cross_entropy]", "'chunk_bytes'");
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(c.x, c.weight, c.bias, c.targets, true, true, true, -1.0), ValueError,
                     "[linear_cross_entropy]", "'logit_softcap'");
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(c.x, c.weight, c.bias, c.targets, false, false, false, std::nan("")),
                     ValueError, "[linear_cross_entropy]", "'logit_softcap'");
  EXPECT_ALPHA_ERROR(ops::linear_cross_entropy(c.x, random({0, 3}), Tensor(), c.targets, true, true, false),
                     ShapeError, "[linear_cross_entropy]", "'weight'", "at least one class");
}

}  // namespace
}  // namespace alpha
