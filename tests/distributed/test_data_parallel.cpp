// Gradient bucketing, ZeRO-1 sharding and rank bookkeeping on the CPU, through the in-process
// communicator, for 1, 2, 3, 4 and 8 ranks: the averaged gradients, the sharded AdamW step against a
// plain AdamW step on the averaged gradients, the global norm, the shard state, and the resume check.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "alpha/autograd/functions.h"
#include "alpha/autograd/variable.h"
#include "alpha/core/error.h"
#include "alpha/distributed/data_parallel.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/optim.h"
#include "distributed/in_process_communicator.h"
#include "support/checks.h"
#include "support/data_parallel_steps.h"

namespace alpha::distributed {
namespace {

using std::chrono::milliseconds;
using test::InProcessCommunicator;
using test::InProcessGroup;
using test::run_ranks;

TEST(PlanBuckets, ReverseOrderClosedAtTheSizeAndPaddedToWholeAlignedShards) {
  // 4-byte elements, 40-byte buckets: [7, 3] closes at 40 bytes, [20] alone (oversized), [5, 2] is the rest. Each
  // is padded to 4 shards of a multiple of kShardAlignment (8) elements.
  ASSERT_EQ(kShardAlignment, 8);
  std::vector<Bucket> b = plan_buckets({2, 5, 20, 3, 7}, 4, 40, 4);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].entries.size(), 2u);
  EXPECT_EQ(b[0].entries[0].parameter, 4u);
  EXPECT_EQ(b[0].entries[1].parameter, 3u);
  EXPECT_EQ(b[0].entries[1].offset, 7);
  EXPECT_EQ(b[0].numel, 10);
  EXPECT_EQ(b[0].padded_numel, 32);
  EXPECT_EQ(b[0].shard_numel, 8);
  EXPECT_EQ(b[1].entries.size(), 1u);
  EXPECT_EQ(b[1].entries[0].parameter, 2u);
  EXPECT_EQ(b[1].padded_numel, 32);
  EXPECT_EQ(b[2].numel, 7);
  EXPECT_EQ(b[2].padded_numel, 32);
  // A bucket of a whole number of aligned shards is not padded further.
  EXPECT_EQ(plan_buckets({64}, 4, 40, 4)[0].padded_numel, 64);
  EXPECT_EQ(plan_buckets({65}, 4, 40, 4)[0].padded_numel, 96);
  EXPECT_EQ(b[2].entries[1].parameter, 0u);
}

TEST(ShardSegments, TheRanksCoverEveryElementOfEveryBucketOnce) {
  std::vector<int64_t> numels{3, 17, 1, 64, 5, 9, 128, 2};
  for (int world : {1, 2, 3, 4, 8}) {
    std::vector<Bucket> buckets = plan_buckets(numels, 4, 100, world);
    std::vector<std::vector<int>> covered;
    for (int64_t n : numels) covered.emplace_back(size_t(n), 0);
    for (int rank = 0; rank < world; ++rank)
      for (const auto& s : shard_segments(buckets, rank)) {
        const Bucket& b = buckets[s.bucket];
        EXPECT_LE(s.shard_offset + s.numel, b.shard_numel);
        for (int64_t i = 0; i < s.numel; ++i) ++covered[s.parameter][size_t(s.parameter_offset + i)];
      }
    for (size_t p = 0; p < numels.size(); ++p)
      for (int64_t i = 0; i < numels[p]; ++i)
        ASSERT_EQ(covered[p][size_t(i)], 1) << "world " << world << " parameter " << p << " element " << i;
  }
}

// A small "model": parameters of odd sizes (one large enough to get a bucket of its own), with gradients
// that differ per rank.
struct Replica {
  std::vector<nn::NamedParameter> parameters;

  explicit Replica(int rank) {
    const std::vector<Shape> shapes{{3, 5}, {7}, {40, 3}, {1}, {6, 2}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor value = Tensor::normal(shapes[i], 0.0, 1.0, 100 + i);    // the same on every rank
      std::string name = std::string("p").append(std::to_string(i));  // (GCC 12 -Wrestrict misfires on "p" + ...)
      autograd::Variable v(value, true, name);
      Tensor grad = Tensor::normal(shapes[i], 0.0, 1.0, 1000 * (rank + 1) + i);
      autograd::backward(v, grad);  // a leaf root: its gradient buffer receives `grad`
      parameters.push_back({name, v, i % 2 == 0});
    }
  }
};

// The average over ranks of parameter p's gradient, computed here in rank order.
Tensor averaged_grad(size_t p, int world) {
  Tensor sum = Replica(0).parameters[p].variable.grad().clone();
  std::vector<float> total = sum.to_vector<float>();
  for (int r = 1; r < world; ++r) {
    std::vector<float> g = Replica(r).parameters[p].variable.grad().to_vector<float>();
    for (size_t i = 0; i < total.size(); ++i) total[i] += g[i];
  }
  for (float& x : total) x /= float(world);
  return Tensor::from_vector(total, sum.shape());
}

TEST(DataParallel, AllReduceLeavesTheAverageOnEveryRank) {
  for (int world : {1, 2, 3, 4, 8}) {
    auto group = std::make_shared<InProcessGroup>(world, milliseconds(10000));
    std::vector<Replica> replicas;
    for (int r = 0; r < world; ++r) replicas.emplace_back(r);
    run_ranks(world, [&](int rank) {
      InProcessCommunicator comm(group, rank);
      // p2 (480 bytes) is reduced where it is, the others (60 bytes and less) packed.
      DataParallelOptions options{/*bucket_bytes=*/32, false};
      options.packed_below_bytes = 64;
      DataParallel dp(comm, replicas[size_t(rank)].parameters, options);
      EXPECT_GT(dp.buckets().size(), 2u);
      std::vector<Tensor> before;
      for (const auto& p : replicas[size_t(rank)].parameters) before.push_back(p.variable.grad());
      alpha::test::reduce_gradients(dp);
      EXPECT_EQ(comm.collectives(), int64_t(dp.buckets().size())) << "one grouped collective per bucket";
      // Averaged where it is, or (packed) a view of its bucket's buffer: nothing copied back either way.
      for (size_t p = 0; p < before.size(); ++p)
        EXPECT_EQ(replicas[size_t(rank)].parameters[p].variable.grad().shares_storage(before[p]), p == 2)
            << "parameter " << p;
    });
    for (size_t p = 0; p < replicas[0].parameters.size(); ++p) {
      std::vector<float> expected = averaged_grad(p, world).to_vector<float>();
      for (int r = 0; r < world; ++r) {
        std::vector<float> got = replicas[size_t(r)].parameters[p].variable.grad().to_vector<float>();
        ASSERT_EQ(got.size(), expected.size());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], expected[i], 1e-6) << "world " << world << " rank " << r << " param " << p;
      }
    }
  }
}

// reduce_dtype bf16: each rank's gradients rounded to bf16 in the buckets, averaged there (the in-process
// communicator adds in rank order in f32 and rounds the average to bf16, as NCCL's ring does on two ranks), and
// handed back as bf16 views of the buckets. (The step on bf16 gradients needs the GPU's kernels: the CPU backend
// computes in f32 and f64 only; tests/cuda/test_cuda_nccl.cpp steps them, plain and ZeRO-1.)
TEST(DataParallel, Bf16ReductionAveragesTheRoundedGradientsInBf16) {
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::vector<Tensor> expected;
    for (size_t p = 0; p < Replica(0).parameters.size(); ++p) {
      std::vector<float> total = Replica(0).parameters[p].variable.grad().to(DType::bf16).to_vector<float>();
      for (int r = 1; r < world; ++r) {
        std::vector<float> g = Replica(r).parameters[p].variable.grad().to(DType::bf16).to_vector<float>();
        for (size_t i = 0; i < total.size(); ++i) total[i] += g[i];
      }
      for (float& x : total) x /= float(world);
      expected.push_back(Tensor::from_vector(total, Replica(0).parameters[p].variable.shape()).to(DType::bf16));
    }
    auto group = std::make_shared<InProcessGroup>(world, milliseconds(10000));
    std::vector<Replica> replicas;
    for (int r = 0; r < world; ++r) replicas.emplace_back(r);
    run_ranks(world, [&](int rank) {
      InProcessCommunicator comm(group, rank);
      std::vector<nn::NamedParameter>& mine = replicas[size_t(rank)].parameters;
      DataParallel dp(comm, mine, {/*bucket_bytes=*/32, false, false, DType::bf16});
      alpha::test::reduce_gradients(dp);
      for (size_t p = 0; p < mine.size(); ++p) {
        EXPECT_EQ(mine[p].variable.grad().dtype(), DType::bf16) << "parameter " << p;
        EXPECT_TRUE(alpha::test::bit_equal(mine[p].variable.grad(), expected[p])) << "parameter " << p;
      }
    });
  }
}

TEST(DataParallel, StepLossesAreGatheredRankByRankInTheGradientsSynchronisation) {
  constexpr int kWorld = 3;
  // reduce_gradients reads them on the host; queue_reduction leaves them on the device, the gradients reduced in
  // place as well.
  for (bool queued : {false, true}) {
    SCOPED_TRACE(queued ? "queue_reduction" : "reduce_gradients");
    auto group = std::make_shared<InProcessGroup>(kWorld, milliseconds(10000));
    std::vector<Replica> replicas;
    for (int r = 0; r < kWorld; ++r) replicas.emplace_back(r);
    std::vector<std::vector<float>> got(kWorld);
    run_ranks(kWorld, [&](int rank) {
      InProcessCommunicator comm(group, rank);
      DataParallelOptions options{/*bucket_bytes=*/32, false};
      options.packed_below_bytes = 0;  // every gradient reduced where it is: no packed buffer at all
      DataParallel dp(comm, replicas[size_t(rank)].parameters, options);
      // Two micro-batches a rank; values no other rank or slot has.
      Tensor losses = Tensor::from_vector(std::vector<float>{1.5f + rank, -0.25f * float(rank + 1)}, {2});
      const Tensor first_grad = replicas[size_t(rank)].parameters[0].variable.grad();
      got[size_t(rank)] =
          queued ? dp.queue_reduction(losses).to_vector<float>() : alpha::test::reduce_gradients(dp, losses);
      EXPECT_EQ(comm.collectives(), int64_t(dp.buckets().size()) + 1) << "the buckets and one gather";
      EXPECT_EQ(replicas[size_t(rank)].parameters[0].variable.grad().storage(), first_grad.storage())
          << "the gradients averaged where they are";
      EXPECT_ALPHA_ERROR(dp.gradient_shards(), ConfigError, "[DataParallel::gradient_shards]", "in place");
    });
    const std::vector<float> expected{1.5f, -0.25f, 2.5f, -0.5f, 3.5f, -0.75f};
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(got[size_t(r)], expected) << "rank " << r;
  }
}

// The deterministic reduction gives the bits of one process accumulating the ranks' gradients as
// micro-batches: each scaled by 1/world first (the trainer scales the loss by 1/grad_accum), then added
// in rank order with autograd's accumulation add. Plain and ZeRO-1 (its shards); powers of two.
TEST(DataParallel, DeterministicReductionEqualsAccumulationInRankOrderBitForBit) {
  for (bool zero1 : {false, true}) {
    for (int world : {2, 4, 8}) {
      SCOPED_TRACE(std::string(zero1 ? "ZeRO-1" : "plain") + " world " + std::to_string(world));
      std::vector<Tensor> accumulated;
      for (size_t p = 0; p < Replica(0).parameters.size(); ++p) {
        Tensor sum;
        for (int r = 0; r < world; ++r) {
          Tensor g = ops::scale(Replica(r).parameters[p].variable.grad(), 1.0 / world);
          if (r == 0) sum = g;
          else ops::add_(sum, g);
        }
        accumulated.push_back(sum);
      }
      auto group = std::make_shared<InProcessGroup>(world, milliseconds(10000));
      std::vector<Replica> replicas;
      for (int r = 0; r < world; ++r) replicas.emplace_back(r);
      std::vector<std::vector<Tensor>> shards(static_cast<size_t>(world));
      std::vector<std::vector<ShardSegment>> segments(static_cast<size_t>(world));
      run_ranks(world, [&](int rank) {
        InProcessCommunicator comm(group, rank);
        DataParallel dp(comm, replicas[size_t(rank)].parameters, {/*bucket_bytes=*/32, zero1, /*deterministic=*/true});
        alpha::test::reduce_gradients(dp);
        if (zero1) {
          segments[size_t(rank)] = dp.segments();
          for (const Tensor& shard : dp.gradient_shards()) shards[size_t(rank)].push_back(shard.clone());
        }
      });
      for (int r = 0; r < world; ++r) {
        if (!zero1) {
          for (size_t p = 0; p < accumulated.size(); ++p)
            EXPECT_TRUE(alpha::test::bit_equal(replicas[size_t(r)].parameters[p].variable.grad(), accumulated[p]))
                << "rank " << r << " param " << p;
          continue;
        }
        for (const ShardSegment& s : segments[size_t(r)]) {
          Tensor got = shards[size_t(r)][s.bucket].slice(0, s.shard_offset, s.shard_offset + s.numel);
          Tensor want = accumulated[s.parameter].view({-1}).slice(0, s.parameter_offset, s.parameter_offset + s.numel);
          EXPECT_TRUE(alpha::test::bit_equal(got, want)) << "rank " << r << " param " << s.parameter;
        }
      }
    }
  }
}

TEST(DataParallel, BackwardLaunchesEachBucketAsSoonAsItsGradientsAreComplete) {
  // loss = sum(((a * x) * b) * a): backward completes b's gradient first (at the second product), a's last
  // (its lowest feeder is the first product). One parameter per bucket: bucket 0 holds b, bucket 1 a.
  constexpr int kWorld = 2;
  auto group = std::make_shared<InProcessGroup>(kWorld, milliseconds(10000));
  std::vector<std::vector<float>> grad_a(kWorld), grad_b(kWorld);
  std::vector<std::vector<std::string>> ready(kWorld);
  std::vector<std::vector<int64_t>> collectives_at_ready(kWorld);
  run_ranks(kWorld, [&](int rank) {
    InProcessCommunicator comm(group, rank);
    autograd::Variable a(Tensor::full({3}, 2.0, DType::f32), true, "a"),
        b(Tensor::full({3}, 3.0, DType::f32), true, "b");
    DataParallel dp(comm, {{"a", a, true}, {"b", b, true}}, {/*bucket_bytes=*/1, false});
    ASSERT_EQ(dp.buckets().size(), 2u);
    autograd::Variable x(Tensor::full({3}, double(rank + 1), DType::f32));
    autograd::Variable loss = autograd::sum(autograd::mul(autograd::mul(autograd::mul(a, x), b), a));
    autograd::LeafReadyFn hook = dp.gradient_ready_hook();
    autograd::backward(loss, {}, [&](const autograd::VariableState& leaf) {
      hook(leaf);
      ready[size_t(rank)].push_back(&leaf == a.state().get() ? "a" : "b");
      collectives_at_ready[size_t(rank)].push_back(comm.collectives());
    });
    alpha::test::reduce_gradients(dp);
    EXPECT_EQ(comm.collectives(), 2) << "reduce_gradients found both buckets launched";
    grad_a[size_t(rank)] = a.grad().to_vector<float>();
    grad_b[size_t(rank)] = b.grad().to_vector<float>();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(ready[size_t(r)], (std::vector<std::string>{"b", "a"}));
    EXPECT_EQ(collectives_at_ready[size_t(r)], (std::vector<int64_t>{1, 2})) << "each bucket went out in backward";
    // d/da = 2 a b x = 12 x, d/db = a^2 x = 4 x, averaged over x = 1, 2: 18 and 6.
    EXPECT_EQ(grad_a[size_t(r)], std::vector<float>(3, 18.0f));
    EXPECT_EQ(grad_b[size_t(r)], std::vector<float>(3, 6.0f));
  }
}

// Also with p2's gradient (480 bytes) reduced from where it is (packed_below_bytes 64), in buckets of a parameter or
// two and in one bucket, where it spans shards and sits between packed runs.
TEST(DataParallel, Zero1StepMatchesAdamWOnTheAveragedGradients) {
  const DataParallel::AdamW adamw{0.9, 0.95, 1e-8, 0.1};
  const double lr = 1e-2, clip = 0.5;
  struct Layout {
    int64_t bucket_bytes, packed_below_bytes;
  };
  for (const Layout& layout : {Layout{32, 1 << 20}, Layout{32, 64}, Layout{1 << 20, 64}})
    for (int world : {1, 2, 3, 4, 8}) {
      // The reference: every parameter stepped twice by AdamW with the averaged gradient, clipped by its norm.
      Replica reference(0);
      std::vector<Tensor> grads, m, v;
      for (size_t p = 0; p < reference.parameters.size(); ++p) {
        grads.push_back(averaged_grad(p, world));
        m.push_back(Tensor::zeros(grads.back().shape(), DType::f32));
        v.push_back(Tensor::zeros(grads.back().shape(), DType::f32));
      }
      double norm = ops::global_grad_norm(grads);
      std::vector<Tensor> clipped;
      for (auto& g : grads) clipped.push_back(g.clone());
      ops::clip_grad_norm(clipped, clip, norm);
      for (int64_t step = 1; step <= 2; ++step)
        for (size_t p = 0; p < reference.parameters.size(); ++p) {
          ops::AdamWConfig config{
              lr, adamw.beta1, adamw.beta2, adamw.eps, reference.parameters[p].decay ? adamw.weight_decay : 0.0, step};
          ops::adamw_step(reference.parameters[p].variable.mutable_value(), clipped[p], m[p], v[p], config);
        }

      auto group = std::make_shared<InProcessGroup>(world, milliseconds(10000));
      std::vector<Replica> replicas;
      for (int r = 0; r < world; ++r) replicas.emplace_back(r);
      std::vector<double> norms(static_cast<size_t>(world));
      run_ranks(world, [&](int rank) {
        InProcessCommunicator comm(group, rank);
        Replica& mine = replicas[size_t(rank)];
        DataParallelOptions options{layout.bucket_bytes, true};
        options.packed_below_bytes = layout.packed_below_bytes;
        DataParallel dp(comm, mine.parameters, options);
        for (int step = 0; step < 2; ++step) {
          if (step == 1)  // the same gradients again (the first step's were consumed)
            for (size_t p = 0; p < mine.parameters.size(); ++p)
              autograd::backward(mine.parameters[p].variable, Replica(rank).parameters[p].variable.grad());
          alpha::test::reduce_gradients(dp);
          for (const auto& p : mine.parameters)
            EXPECT_FALSE(p.variable.grad().defined()) << "ZeRO-1 consumes the local gradients";
          norms[size_t(rank)] = alpha::test::sharded_step(dp, lr, clip, adamw);
        }
        EXPECT_EQ(dp.step_count(), 2);
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_NEAR(norms[size_t(r)], norm, 1e-5 * norm) << "world " << world;
        for (size_t p = 0; p < reference.parameters.size(); ++p) {
          std::vector<float> expected = reference.parameters[p].variable.value().to_vector<float>();
          std::vector<float> got = replicas[size_t(r)].parameters[p].variable.value().to_vector<float>();
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], expected[i], 1e-6)
                << "world " << world << " rank " << r << " param " << p << " [" << i << "], buckets of "
                << layout.bucket_bytes << " bytes, packed below " << layout.packed_below_bytes;
        }
      }
    }
}

// ZeRO-1's reduces from where the large gradients are leave each rank's shards bit for bit as packing every gradient
// does (the same elements at the same places, the same sums), and so the same norm; a large gradient of another dtype
// than the parameters' (f64 here) is packed, converted, and reduced from the bucket's buffer instead.
TEST(DataParallel, Zero1ReducesFromTheGradientsGiveThePackedShards) {
  enum Variant { kPackedAll, kFromGradients, kF64Gradient };
  for (int world : {1, 2, 3, 4, 8}) {
    auto group = std::make_shared<InProcessGroup>(world, milliseconds(10000));
    std::vector<std::vector<std::vector<std::vector<float>>>> shards(
        3, std::vector<std::vector<std::vector<float>>>(static_cast<size_t>(world)));
    std::vector<std::vector<int64_t>> reduces(3, std::vector<int64_t>(static_cast<size_t>(world)));
    run_ranks(world, [&](int rank) {
      InProcessCommunicator comm(group, rank);
      for (Variant variant : {kPackedAll, kFromGradients, kF64Gradient}) {
        Replica mine(rank);
        if (variant == kF64Gradient) {
          autograd::Variable p2 = mine.parameters[2].variable;
          p2.set_grad(p2.grad().to(DType::f64));  // the f32 values exactly
        }
        DataParallelOptions options{/*bucket_bytes=*/1 << 20, true};
        options.packed_below_bytes = variant == kPackedAll ? 1 << 20 : 64;  // p2 (480 bytes) from its gradient
        DataParallel dp(comm, mine.parameters, options);
        const int64_t before = comm.collectives();
        alpha::test::reduce_gradients(dp);
        reduces[variant][size_t(rank)] = comm.collectives() - before;
        for (const Tensor& shard : dp.gradient_shards())
          shards[variant][size_t(rank)].push_back(shard.to_vector<float>());
      }
    });
    EXPECT_EQ(shards[kFromGradients], shards[kPackedAll]) << "world " << world;
    EXPECT_EQ(shards[kF64Gradient], shards[kPackedAll]) << "world " << world;
    // p2 read from its gradient cuts the packed run in two: more reduces (the in-process group runs them one by one).
    EXPECT_GT(reduces[kFromGradients][0], reduces[kPackedAll][0]) << "world " << world;
  }
}

// A step whose factor is NaN (a non-finite loss or norm: ops::step_guard) is skipped on the device: nothing
// moves, settle_sharded_step(false) leaves the step count, and the next step is the first step's bits. The norm
// is the same bits on every rank. The step in two halves (prepare_sharded_step, queue_sharded_update: a CUDA graph's)
// gives queue_sharded_step's bits. Misuse is refused naming what was expected.
TEST(DataParallel, Zero1QueuedStepSkippedOnANonFiniteFactorAndSettledOnce) {
  const DataParallel::AdamW adamw{0.9, 0.95, 1e-8, 0.1};
  constexpr int kWorld = 3;
  auto run = [&](bool skip_first, bool in_halves) {
    auto group = std::make_shared<InProcessGroup>(kWorld, milliseconds(10000));
    std::vector<Replica> replicas;
    for (int r = 0; r < kWorld; ++r) replicas.emplace_back(r);
    std::vector<std::vector<float>> params(kWorld);
    std::vector<double> norms(kWorld);
    run_ranks(kWorld, [&](int rank) {
      InProcessCommunicator comm(group, rank);
      Replica& mine = replicas[size_t(rank)];
      DataParallel dp(comm, mine.parameters, {/*bucket_bytes=*/32, true});
      const Tensor values_before = mine.parameters[2].variable.value().clone();
      for (int attempt = skip_first ? 0 : 1; attempt < 2; ++attempt) {
        if (attempt == 1 && skip_first)  // the same gradients again (the skipped step consumed them)
          for (size_t p = 0; p < mine.parameters.size(); ++p)
            autograd::backward(mine.parameters[p].variable, Replica(rank).parameters[p].variable.grad());
        alpha::test::reduce_gradients(dp);
        const Tensor norm = dp.queue_sharded_norm();
        const Tensor losses = Tensor::from_vector(std::vector<float>{attempt == 0 ? NAN : 1.0f}, {1});
        if (in_halves) {
          EXPECT_ALPHA_ERROR(dp.queue_sharded_update(ops::step_guard(norm, losses, 1.0, 0.5)), ValueError,
                             "[DataParallel::queue_sharded_update]", "prepare_sharded_step");
          dp.prepare_sharded_step(1e-2, adamw);
          EXPECT_ALPHA_ERROR(dp.queue_sharded_update(Tensor()), ValueError, "'factor'");
          dp.queue_sharded_update(ops::step_guard(norm, losses, 1.0, 0.5));
        } else {
          dp.queue_sharded_step(1e-2, ops::step_guard(norm, losses, 1.0, 0.5), adamw);
        }
        EXPECT_ALPHA_ERROR(dp.queue_sharded_step(1e-2, ops::step_guard(norm, losses, 1.0, 0.5), adamw), ValueError,
                           "[DataParallel::queue_sharded_step]", "settle_sharded_step");
        comm.synchronize();
        dp.settle_sharded_step(attempt == 1);
        if (attempt == 0) {
          EXPECT_EQ(dp.step_count(), 0) << "a skipped step does not count";
          EXPECT_TRUE(alpha::test::bit_equal(mine.parameters[2].variable.value(), values_before))
              << "nor moves anything";
        }
        norms[size_t(rank)] = norm.item();
      }
      EXPECT_EQ(dp.step_count(), 1);
      EXPECT_ALPHA_ERROR(dp.settle_sharded_step(true), ValueError, "[DataParallel::settle_sharded_step]",
                         "none queued");
      EXPECT_ALPHA_ERROR(dp.queue_sharded_step(1e-2, Tensor(), adamw), ValueError, "'factor'");
      for (const auto& p : mine.parameters) {
        std::vector<float> v = p.variable.value().to_vector<float>();
        params[size_t(rank)].insert(params[size_t(rank)].end(), v.begin(), v.end());
      }
    });
    for (int r = 1; r < kWorld; ++r) {
      EXPECT_EQ(params[size_t(r)], params[0]) << "rank " << r;
      EXPECT_EQ(norms[size_t(r)], norms[0]) << "the norm's bits on rank " << r;
    }
    return params[0];
  };
  const std::vector<float> first_step = run(false, false);
  EXPECT_EQ(run(true, false), first_step) << "a skipped step leaves the next one the first step's bits";
  EXPECT_EQ(run(false, true), first_step) << "the step in two halves";

  InProcessCommunicator alone(std::make_shared<InProcessGroup>(1, milliseconds(1000)), 0);
  Replica replica(0);
  DataParallel plain(alone, replica.parameters, {/*bucket_bytes=*/32, false});
  EXPECT_ALPHA_ERROR(plain.queue_sharded_norm(), ConfigError, "'zero1'");
}

TEST(DataParallel, ShardStateRoundTripsAndRejectsAnotherLayout) {
  auto group = std::make_shared<InProcessGroup>(1, milliseconds(1000));
  InProcessCommunicator comm(group, 0);
  Replica replica(0);
  DataParallel dp(comm, replica.parameters, {64, true});
  auto state = dp.shard_state();
  ASSERT_EQ(state.size(), 2 * dp.buckets().size());
  EXPECT_EQ(state[0].first, "m/bucket_0");
  std::vector<std::pair<std::string, Tensor>> saved;
  for (auto& [name, t] : state) saved.emplace_back(name, Tensor::full(t.shape(), 0.25, DType::f32));
  dp.load_shard_state(saved, 7);
  EXPECT_EQ(dp.step_count(), 7);
  EXPECT_EQ(dp.shard_state()[1].second.to_vector<float>()[0], 0.25f);

  saved[0].second = Tensor::zeros({saved[0].second.numel() + 1}, DType::f32);
  try {
    dp.load_shard_state(saved, 8);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("m/bucket_0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dp.step_count(), 7) << "a failed load changes nothing";
}

TEST(DataParallel, RejectsParametersWithoutGradientsAndBadOptions) {
  auto group = std::make_shared<InProcessGroup>(1, milliseconds(1000));
  InProcessCommunicator comm(group, 0);
  autograd::Variable no_grad(Tensor::zeros({4}, DType::f32), true, "w");
  DataParallel dp(comm, {{"w", no_grad, true}}, {64, false});
  EXPECT_THROW(alpha::test::reduce_gradients(dp), ValueError);
  autograd::backward(no_grad, Tensor::normal({4}, 0.0, 1.0, 5));
  try {
    alpha::test::reduce_gradients(dp, Tensor::zeros({2}, DType::f64));
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("step_losses"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32 vector"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DataParallel(comm, {}, {64, false}), ValueError);
  EXPECT_THROW(DataParallel(comm, {{"w", no_grad, true}}, {0, false}), ConfigError);
  DataParallelOptions negative{64, false};
  negative.packed_below_bytes = -1;
  EXPECT_ALPHA_ERROR(DataParallel(comm, {{"w", no_grad, true}}, negative), ConfigError, "'packed_below_bytes'", "-1");
  EXPECT_ALPHA_ERROR(DataParallel(comm, {{"w", no_grad, true}}, {64, false, false, DType::f16}), ConfigError,
                     "'reduce_dtype'", "bf16", "f16");
  EXPECT_ALPHA_ERROR(DataParallel(comm, {{"w", no_grad, true}}, {64, false, true, DType::bf16}), ConfigError,
                     "'reduce_dtype'", "deterministic");
}

TEST(CheckResume, NamesTheWorldSizeFirstThenTheShardingLayout) {
  try {
    check_resume({2, false, 0}, {1, false, 0});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("world size"), std::string::npos) << message;
    EXPECT_NE(message.find("--gpus 2"), std::string::npos) << message;
  }
  EXPECT_THROW(check_resume({2, true, 1 << 20}, {2, false, 0}), ConfigError);
  EXPECT_THROW(check_resume({2, true, 1 << 20}, {2, true, 2 << 20}), ConfigError);
  EXPECT_NO_THROW(check_resume({2, true, 1 << 20}, {2, true, 1 << 20}));
  EXPECT_NO_THROW(check_resume(ParallelLayout::from_json(nlohmann::json()), {1, false, 0}));
  ParallelLayout layout{4, true, 3 << 20};
  ParallelLayout back = ParallelLayout::from_json(layout.to_json());
  EXPECT_EQ(back.world_size, 4);
  EXPECT_TRUE(back.zero1);
  EXPECT_EQ(back.bucket_bytes, 3 << 20);
}

}  // namespace
}  // namespace alpha::distributed
