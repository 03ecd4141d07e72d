// Embedding lookup and its deterministic backward against naive f64 loops: kernels called directly
// into poisoned outputs, the tensor ops on odd shapes, a gradient check, thread-count independence
// and bad ids.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "alpha/autograd/functions.h"
#include "alpha/kernels/embedding.h"
#include "alpha/ops/check.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/embedding.h"
#include "alpha/ops/matmul.h"
#include "kernels/kernel_helpers.h"
#include "support/checks.h"

namespace alpha {
namespace {

using test::all_close;
using test::random;
using test::random_indices;

// Naive references: out[..., c] = table[ids[...], c]; dtable[v, c] = Σ_{i: ids[i] = v} dy[i, c] (an id
// outside [0, V) adds to no row).
Tensor naive_embedding(const Tensor& ids, const Tensor& table) {
  std::vector<int32_t> idv = ids.contiguous().to_vector<int32_t>();
  std::vector<double> tv = table.contiguous().to_vector<double>(), out;
  const int64_t C = table.size(1);
  for (int32_t id : idv)
    for (int64_t c = 0; c < C; ++c) out.push_back(tv[size_t(id * C + c)]);
  Shape shape = ids.shape();
  shape.push_back(C);
  return Tensor::from_vector(out, shape);
}

Tensor naive_embedding_backward(const Tensor& dy, const Tensor& ids, int64_t V) {
  std::vector<int32_t> idv = ids.contiguous().to_vector<int32_t>();
  std::vector<double> dyv = dy.contiguous().to_vector<double>();
  const int64_t C = dy.size(-1);
  std::vector<double> dtable(size_t(V * C), 0.0);
  for (size_t i = 0; i < idv.size(); ++i) {
    if (idv[i] < 0 || idv[i] >= V) continue;
    for (int64_t c = 0; c < C; ++c) dtable[size_t(idv[i] * C + c)] += dyv[i * size_t(C) + size_t(c)];
  }
  return Tensor::from_vector(dtable, {V, C});
}

class EmbeddingSizes : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {};

TEST_P(EmbeddingSizes, KernelsMatchF64Loops) {
  const auto& param = GetParam();
  const auto n = std::get<0>(param);
  const auto dtype = std::get<1>(param);
  // n output elements as N positions of C channels; V = 37 leaves unused rows at small N and makes
  // rows repeat at large N.
  const int64_t C = std::min<int64_t>(n, 16), N = n / C, V = 37;
  Tensor ids = random_indices({N}, int32_t(V));
  Tensor table = random({V, C}, dtype), dy = random({N, C}, dtype);
  ops::dispatch_cpu_float("test", table, [&]<class T>() {
    Tensor out = test::poisoned({N, C}, dtype);
    kernels::cpu::embedding(kernels::EmbeddingArgs<T>{ids.data<int32_t>(), table.data<T>(), out.data<T>(), N, V, C});
    EXPECT_TRUE(all_close(out, naive_embedding(ids, table), "embedding"));
    Tensor dtable = test::poisoned({V, C}, dtype);
    kernels::cpu::embedding_backward(
        kernels::EmbeddingBackwardArgs<T>{dy.data<T>(), ids.data<int32_t>(), dtable.data<T>(), N, V, C});
    EXPECT_TRUE(all_close(dtable, naive_embedding_backward(dy, ids, V), "embedding"));
    // Accumulating onto a table gradient already there: used rows get their sums added, the others stay as they
    // were (NaN rows would show a read of them or a write).
    Tensor before = random({V, C}, dtype);
    std::vector<double> want = naive_embedding_backward(dy, ids, V).to_vector<double>(),
                        bv = before.to_vector<double>();
    std::vector<bool> used(size_t(V), false);
    for (int32_t id : ids.to_vector<int32_t>()) used[size_t(id)] = true;
    for (int64_t v = 0; v < V; ++v)
      for (int64_t c = 0; c < C; ++c)
        want[size_t(v * C + c)] = used[size_t(v)] ? want[size_t(v * C + c)] + bv[size_t(v * C + c)] : NAN;
    Tensor sums = before.clone();
    for (int64_t v = 0; v < V; ++v)
      if (!used[size_t(v)]) sums.select(0, v).copy_from(Tensor::full({C}, NAN, dtype));
    kernels::cpu::embedding_backward(
        kernels::EmbeddingBackwardArgs<T>{dy.data<T>(), ids.data<int32_t>(), sums.data<T>(), N, V, C, true});
    for (int64_t v = 0; v < V; ++v) {
      if (used[size_t(v)]) continue;
      for (double x : sums.select(0, v).to_vector<double>()) ASSERT_TRUE(std::isnan(x)) << "unused row " << v;
      sums.select(0, v).copy_from(Tensor::zeros({C}, dtype));
      for (int64_t c = 0; c < C; ++c) want[size_t(v * C + c)] = 0.0;
    }
    EXPECT_TRUE(all_close(sums, Tensor::from_vector(want, {V, C}), "embedding"));
  });
}

INSTANTIATE_TEST_SUITE_P(AllSizes, EmbeddingSizes,
                         ::testing::Combine(::testing::ValuesIn(test::kSizes),
                                            ::testing::Values(DType::f32, DType::f64)));

TEST(Embedding, OpsOnOddShapes) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor table = random({11, 13}, dtype);
    Tensor ids = random_indices({3, 5}, 11);
    Tensor out = ops::embedding(ids, table);
    EXPECT_EQ(out.shape(), (Shape{3, 5, 13}));
    EXPECT_TRUE(all_close(out, naive_embedding(ids, table), "embedding"));
    Tensor dy = random({3, 5, 13}, dtype);
    EXPECT_TRUE(all_close(ops::embedding_backward(dy, ids, 11), naive_embedding_backward(dy, ids, 11), "embedding"));
  }
  // Strided ids and a transposed (non-contiguous) table.
  Tensor ids = random_indices({13, 7}, 5).transpose(0, 1);
  Tensor table = random({9, 5}, DType::f64).transpose(0, 1);
  EXPECT_TRUE(all_close(ops::embedding(ids, table), naive_embedding(ids, table), "embedding"));
}

TEST(Embedding, BackwardIsIdenticalAcrossThreadCounts) {
  // Many positions per row (N = 200000 over V = 50), so each row sums a long bucket of f32 terms.
  test::ThreadCountGuard restore;
  Tensor ids = random_indices({200000}, 50);
  Tensor dy = random({200000, 8}, DType::f32);
  omp_set_num_threads(1);
  std::vector<float> one = ops::embedding_backward(dy, ids, 50).to_vector<float>();
  omp_set_num_threads(3);
  std::vector<float> three = ops::embedding_backward(dy, ids, 50).to_vector<float>();
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
}

TEST(Embedding, GradientMatchesFiniteDifferences) {
  // Repeated ids: rows 1 and 3 receive several contributions, row 4 none.
  Tensor ids = Tensor::from_vector<int32_t>({1, 3, 1, 0, 2, 3, 1}, {7});
  EXPECT_TRUE(test::gradcheck([&](const auto& v) { return autograd::embedding(ids, v[0]); },
                              {random({5, 4}, DType::f64)}));
  Tensor ids2d = random_indices({2, 3}, 6);
  EXPECT_TRUE(test::gradcheck([&](const auto& v) { return autograd::embedding(ids2d, v[0]); },
                              {random({6, 3}, DType::f64)}));
}

// ids_checked (autograd's backward, whose forward checked them) skips the range check; an id outside the
// table then adds to no row instead of writing out of bounds.
TEST(Embedding, BackwardOfCheckedIdsSkipsTheCheckAndAnyIdOutsideTheTable) {
  Tensor dy = random({6, 3}, DType::f64);
  Tensor ids = Tensor::from_vector<int32_t>({2, 9, 0, -1, 2, 4}, {6});
  EXPECT_TRUE(all_close(ops::embedding_backward(dy, ids, 5, /*ids_checked=*/true), naive_embedding_backward(dy, ids, 5),
                        "embedding"));
}

TEST(Embedding, BadInputsRaise) {
  Tensor table = random({10, 4});
  Tensor too_big = Tensor::from_vector<int32_t>({0, 9, 3, 10, 2}, {5});
  EXPECT_ALPHA_ERROR(ops::embedding(too_big, table), ValueError, "[embedding]", "'ids'", "[0, 10)", "got 10",
                     "position 3");
  Tensor negative = Tensor::from_vector<int32_t>({0, 1, 2, 3, 4, 5, -1}, {7});
  EXPECT_ALPHA_ERROR(ops::embedding(negative, table), ValueError, "[embedding]", "'ids'", "got -1", "position 6");
  EXPECT_ALPHA_ERROR(ops::embedding(random({5}), table), DTypeError, "[embedding]", "'ids'", "i32", "f32");
  Tensor ids = random_indices({5}, 10);
  EXPECT_ALPHA_ERROR(ops::embedding(ids, random({40})), ShapeError, "[embedding]", "'table'", "2 dimensions");
  EXPECT_ALPHA_ERROR(ops::embedding(ids, Tensor::zeros({10, 4}, DType::i32)), DTypeError, "[embedding]", "'table'",
                     "i32");
  EXPECT_ALPHA_ERROR(ops::embedding_backward(random({5, 4}), too_big, 10), ValueError, "[embedding_backward]",
                     "'ids'", "position 3");
  EXPECT_ALPHA_ERROR(ops::embedding_backward(random({6, 4}), ids, 10), ShapeError, "[embedding_backward]", "'dy'",
                     "[5, 4]", "[6, 4]");
  EXPECT_ALPHA_ERROR(ops::embedding_backward(random({5, 4}), ids, 0), ValueError, "[embedding_backward]",
                     "'vocab_size'");
  // A table gradient in another dtype than dy's: only f32 beside bf16/f16 dy (a GPU's).
  EXPECT_ALPHA_ERROR(ops::embedding_backward(random({5, 4}), ids, 10, false, DType::f64), DTypeError,
                     "[embedding_backward]", "'grad_dtype'", "f32 (dy's), or f32 beside bf16 or f16 dy", "f64");
  // A gradient to add into: the table's shape, the gradient's dtype, contiguous.
  Tensor dy = random({5, 4});
  EXPECT_ALPHA_ERROR(ops::embedding_backward(dy, ids, 10, false, std::nullopt, random({10, 5})), ShapeError,
                     "[embedding_backward]", "'add_into'", "[10, 4]");
  EXPECT_ALPHA_ERROR(ops::embedding_backward(dy, ids, 10, false, std::nullopt, random({10, 4}, DType::f64)), DTypeError,
                     "[embedding_backward]", "'add_into'", "f32");
  EXPECT_ALPHA_ERROR(ops::embedding_backward(dy, ids, 10, false, std::nullopt, random({4, 10}).transpose(0, 1)),
                     LayoutError, "[embedding_backward]", "'add_into'");
}

// A tied table (looked up, and read again by a linear layer): the lookup's backward adds its rows into the
// pass's sum backward offers it, the result the two contributions' sum, in f64 the same bits as adding them.
TEST(Embedding, TiedTableGetsBothContributionsAddedInPlace) {
  for (DType dtype : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor table = random({11, 6}, dtype), ids = random_indices({2, 7}, 11), x = random({2, 7, 6}, dtype);
    Tensor dlogits = random({2, 7, 11}, dtype);
    autograd::Variable w(table, true);
    autograd::Variable logits =
        autograd::linear(autograd::add(autograd::embedding(ids, w), autograd::Variable(x)), w, autograd::Variable());
    autograd::backward(logits, dlogits);
    Tensor h = ops::add(ops::embedding(ids, table), x);
    Tensor want =
        ops::add(ops::linear_backward(dlogits, h, table, false, true, false).dweight,
                 ops::embedding_backward(ops::linear_backward(dlogits, h, table, true, false, false).dx, ids, 11));
    if (dtype == DType::f64)
      EXPECT_EQ(w.grad().to_vector<double>(), want.to_vector<double>());
    else
      EXPECT_TRUE(all_close(w.grad(), want, "embedding"));
  }
}

// With a compute dtype the lookup reads the table converted (a parameter's held copy) and its output has that
// dtype, while the table's gradient comes back in the table's own dtype: here an f64 table computed in f32,
// whose gradient is the f32 op's, widened.
TEST(Embedding, ComputeDtypeLooksUpTheConvertedTableAndReturnsTheTablesGradient) {
  Tensor ids = Tensor::from_vector<int32_t>({1, 3, 1, 0, 2, 3, 1}, {7});
  autograd::Variable table(random({5, 4}, DType::f64), /*requires_grad=*/true);
  autograd::Variable out = autograd::embedding(ids, table, false, DType::f32);
  EXPECT_EQ(out.dtype(), DType::f32);
  EXPECT_TRUE(test::bit_equal(out.value(), ops::embedding(ids, table.value().to(DType::f32))));
  Tensor dy = random({7, 4}, DType::f32);
  autograd::backward(out, dy);
  EXPECT_EQ(table.grad().dtype(), DType::f64);
  EXPECT_TRUE(test::bit_equal(table.grad(), ops::embedding_backward(dy, ids, 5).to(DType::f64)));
  EXPECT_ALPHA_ERROR(autograd::embedding(ids, table, false, DType::i32), DTypeError, "[embedding]", "'compute_dtype'",
                     "floating-point", "i32");
}

}  // namespace
}  // namespace alpha
