// The NCCL communicator on two GPUs of this machine, one thread per rank (cuda:0 and cuda:1), through the
// same TCP rendezvous as separate processes use: every collective's result in f32 and bf16, data-parallel
// gradient averaging and a ZeRO-1 step against the in-process communicator's on the CPU (ZeRO-1 also with every
// parameter holding a bf16 copy: the copies all-gathered, the values after them; and both with the gradients
// reduced in bf16, within its rounding), and a rank that stops participating named within the timeout. Skipped without
// NCCL or with fewer than two GPUs. And the trainer's step captured with its collectives in a CUDA graph against the
// same steps made without it, on two GPUs or one (a group of one rank).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/autograd/variable.h"
#include "alpha/distributed/data_parallel.h"
#include "alpha/distributed/local_launcher.h"
#include "alpha/distributed/nccl_communicator.h"
#include "alpha/ops/elementwise.h"
#include "distributed/in_process_communicator.h"
#include "support/checks.h"
#include "support/data_parallel_steps.h"
#include "support/gpu.h"
#include "train/golden_run_util.h"
#if ALPHA_WITH_CUDA
#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha::distributed {
namespace {

using std::chrono::milliseconds;
constexpr int kWorld = 2;

// Rank `rank` of `world` on cuda:<rank>, through the rendezvous at `port`.
std::unique_ptr<Communicator> join_group(int rank, int world, int port, milliseconds timeout) {
  LaunchEnv env;
  env.rank = rank;
  env.local_rank = rank;
  env.world_size = world;
  env.master_port = port;
  env.source = "test";
  return make_nccl_communicator(env, timeout);
}

// On as many GPUs as there are, up to two: NCCL's one-rank group still runs its collectives through the
// communicator's stream and events, so one GPU checks what a capture records of them.
class CudaNcclUpToTwoGpus : public alpha::test::GpuTest<> {
 protected:
  void SetUp() override {
    alpha::test::GpuTest<>::SetUp();
    if (IsSkipped()) return;
    if (!nccl_built()) GTEST_SKIP() << "built without NCCL";
#if ALPHA_WITH_CUDA
    world_ = std::min(cuda::device_count(), kWorld);
#endif
  }
  int world_ = 1;
};

// On two GPUs, skipped with fewer.
class CudaNccl : public CudaNcclUpToTwoGpus {
 protected:
  void SetUp() override {
    CudaNcclUpToTwoGpus::SetUp();
    if (IsSkipped()) return;
    if (world_ < kWorld) GTEST_SKIP() << "needs " << kWorld << " GPUs";
    port_ = free_local_port();
  }

  std::unique_ptr<Communicator> join(int rank, milliseconds timeout) const {
    return join_group(rank, kWorld, port_, timeout);
  }

  int port_ = 0;
};

std::vector<float> on_host(const Tensor& t) { return t.to_vector<float>(); }

TEST_F(CudaNccl, CollectivesGiveEveryRankTheExpectedValues) {
  test::run_ranks(kWorld, [&](int rank) {
    std::unique_ptr<Communicator> comm = join(rank, milliseconds(60000));
    Device device = comm->device();
    EXPECT_EQ(device, Device::cuda(rank));
    std::vector<float> mine{float(rank), float(10 * rank), 1.0f, -2.0f};
    Tensor data = Tensor::from_vector(mine, {4}).to(device);
    comm->all_reduce(data.raw_data(), 4, DType::f32, ReduceOp::sum);
    Tensor average = Tensor::from_vector(mine, {4}).to(device);
    comm->all_reduce(average.raw_data(), 4, DType::f32, ReduceOp::average);
    // reduce_scatter in place, as ZeRO-1 runs it: rank r's block is at r * 2.
    Tensor blocks = Tensor::from_vector(std::vector<float>{1.0f + rank, 2.0f, 3.0f, 4.0f + rank}, {4}).to(device);
    Tensor shard = blocks.slice(0, 2 * rank, 2 * rank + 2);
    comm->reduce_scatter(blocks.raw_data(), shard.raw_data(), 2, DType::f32, ReduceOp::sum);
    Tensor gathered = Tensor::from_vector(std::vector<float>{0, 0, 0, 0}, {4}).to(device);
    Tensor own = Tensor::from_vector(std::vector<float>{float(rank), float(-rank)}, {2}).to(device);
    comm->all_gather(own.raw_data(), gathered.raw_data(), 2, DType::f32);
    Tensor root = Tensor::from_vector(std::vector<float>{float(rank + 5)}, {1}).to(device);
    comm->broadcast(root.raw_data(), 1, DType::f32, 1);
    // Reduces to their owners as one group, as ZeRO-1 reduces its gradients: element 0 to rank 0 in place, the other
    // from a buffer of its own to rank 1; each rank's other element stays.
    Tensor owned = Tensor::from_vector(std::vector<float>{1.0f + rank, 10.0f + rank}, {2}).to(device);
    Tensor apart = Tensor::from_vector(std::vector<float>{3.0f * rank}, {1}).to(device);
    comm->reduce_many(
        {{owned.raw_data(), owned.raw_data(), 1, 0}, {apart.raw_data(), owned.slice(0, 1, 2).raw_data(), 1, 1}},
        DType::f32, ReduceOp::average);
    Tensor low = Tensor::from_vector(std::vector<float>{1.5f + rank}, {1}).to(DType::bf16).to(device);
    comm->all_reduce(low.raw_data(), 1, DType::bf16, ReduceOp::sum);
    // Several buffers of several dtypes and sizes averaged in place as one grouped collective (the plain step's
    // buckets): element i of rank r's f32 buffer is i + 1000 r, of its bf16 one 2 r + 1.
    std::vector<float> many_f32(100001);
    for (size_t i = 0; i < many_f32.size(); ++i) many_f32[i] = float(i) + 1000.0f * float(rank);
    Tensor wide = Tensor::from_vector(many_f32, {int64_t(many_f32.size())}).to(device);
    Tensor narrow = Tensor::full({5}, 2.0 * rank + 1.0, DType::bf16).to(device);
    comm->all_reduce_many({{wide.raw_data(), many_f32.size(), DType::f32}, {narrow.raw_data(), 5, DType::bf16}},
                          ReduceOp::average);
    // A gather buffer of an odd block size (its memory rounded up to NCCL's window alignment), gathered in place as
    // the deterministic reduction gathers its rows: zeroed first, then every rank's block everywhere.
    Tensor symmetric = comm->gather_buffer(3, DType::f32);
    EXPECT_EQ(symmetric.device(), device);
    EXPECT_EQ(symmetric.shape(), (Shape{2, 3}));
    EXPECT_EQ(on_host(symmetric), std::vector<float>(6, 0.0f));
    Tensor block = symmetric.select(0, rank);
    block.copy_from(Tensor::from_vector(std::vector<float>{float(rank), 7.0f, float(-rank)}, {3}).to(device));
    comm->all_gather(block.raw_data(), symmetric.raw_data(), 3, DType::f32);
    // An all-to-all between gather buffers (the copy engines' path under NCCL_CTA_POLICY=2), then the rank-order
    // sum queued in the collectives' order, as the deterministic reduction runs them: rank r's block q holds
    // 100 r + 10 q + j, so rank q receives 100 r + 10 q + j from every rank r, as row r.
    Tensor send = comm->gather_buffer(3, DType::f32), received = comm->gather_buffer(3, DType::f32);
    std::vector<float> blocks_of_rank;
    for (int q = 0; q < kWorld; ++q)
      for (int j = 0; j < 3; ++j) blocks_of_rank.push_back(float(100 * rank + 10 * q + j));
    send.copy_from(Tensor::from_vector(blocks_of_rank, {kWorld, 3}).to(device));
    comm->all_to_all(send.raw_data(), received.raw_data(), 3, DType::f32);
    Tensor summed = Tensor::zeros({3}, DType::f32, device);
    comm->queue_in_collective_order([&](Stream stream) { ops::sum_rows(received, summed, 0.5, stream); });
    comm->synchronize();
    EXPECT_EQ(on_host(symmetric), (std::vector<float>{0.0f, 7.0f, 0.0f, 1.0f, 7.0f, -1.0f}));
    std::vector<float> expected_rows, expected_sum;
    for (int r = 0; r < kWorld; ++r)
      for (int j = 0; j < 3; ++j) expected_rows.push_back(float(100 * r + 10 * rank + j));
    for (int j = 0; j < 3; ++j) expected_sum.push_back(0.5f * (float(10 * rank + j) + float(100 + 10 * rank + j)));
    EXPECT_EQ(on_host(received), expected_rows);
    EXPECT_EQ(on_host(summed), expected_sum);

    EXPECT_EQ(on_host(data), (std::vector<float>{1.0f, 10.0f, 2.0f, -4.0f}));
    EXPECT_EQ(on_host(average), (std::vector<float>{0.5f, 5.0f, 1.0f, -2.0f}));
    std::vector<float> expected_shard = rank == 0 ? std::vector<float>{3.0f, 4.0f} : std::vector<float>{6.0f, 9.0f};
    EXPECT_EQ(on_host(shard), expected_shard);
    EXPECT_EQ(on_host(owned), rank == 0 ? (std::vector<float>{1.5f, 10.0f}) : (std::vector<float>{2.0f, 1.5f}));
    EXPECT_EQ(on_host(gathered), (std::vector<float>{0.0f, 0.0f, 1.0f, -1.0f}));
    EXPECT_EQ(on_host(root), std::vector<float>{6.0f});
    EXPECT_EQ(on_host(low), std::vector<float>{4.0f});
    std::vector<float> expected_wide(many_f32.size());
    for (size_t i = 0; i < expected_wide.size(); ++i) expected_wide[i] = float(i) + 500.0f;
    EXPECT_EQ(on_host(wide), expected_wide);
    EXPECT_EQ(on_host(narrow.to(DType::f32)), std::vector<float>(5, 2.0f));
  });
}

// Parameters of odd sizes with per-rank gradients, on `device`, holding bf16 compute copies if asked; with
// bf16_gradients the gradients are f32 values that bf16 holds exactly.
std::vector<nn::NamedParameter> replica(int rank, Device device, bool hold_copies = false,
                                        bool bf16_gradients = false) {
  const std::vector<Shape> shapes{{3, 5}, {7}, {40, 3}, {1}, {6, 2}};
  std::vector<nn::NamedParameter> parameters;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string name = std::string("p").append(std::to_string(i));  // (GCC 12 -Wrestrict misfires on "p" + ...)
    autograd::Variable v(Tensor::normal(shapes[i], 0.0, 1.0, 100 + i).to(device), true, name);
    Tensor grad = Tensor::normal(shapes[i], 0.0, 1.0, 1000 * (rank + 1) + i);
    autograd::backward(v, (bf16_gradients ? grad.to(DType::bf16).to(DType::f32) : grad).to(device));
    if (hold_copies) autograd::cast(v, DType::bf16);
    parameters.push_back({name, v, i % 2 == 0});
  }
  autograd::clear_tape();
  return parameters;
}

// Two steps of data parallel (plain, or ZeRO-1 with clipping), returning every rank's parameters. With
// hold_copies (ZeRO-1), each rank's held bf16 copies must be its values rounded to nearest after each step.
std::vector<std::vector<std::vector<float>>> train_two_steps(int world, DataParallelOptions options,
                                                             const std::function<Communicator&(int)>& comm_of,
                                                             bool hold_copies = false, bool bf16_gradients = false) {
  const bool zero1 = options.zero1;
  std::vector<std::vector<std::vector<float>>> params(static_cast<size_t>(world));
  test::run_ranks(world, [&](int rank) {
    Communicator& comm = comm_of(rank);
    std::vector<nn::NamedParameter> mine = replica(rank, comm.device(), hold_copies, bf16_gradients);
    DataParallel dp(comm, mine, options);
    for (int step = 0; step < 2; ++step) {
      if (step == 1)
        for (size_t p = 0; p < mine.size(); ++p) {
          std::vector<nn::NamedParameter> again = replica(rank, comm.device(), false, bf16_gradients);
          if (!zero1) mine[p].variable.clear_grad();  // a fresh gradient (a bf16 bucket view takes no f32 adds)
          autograd::backward(mine[p].variable, again[p].variable.grad());
        }
      alpha::test::reduce_gradients(dp);
      if (options.reduce_dtype) {
        for (const Tensor& shard : dp.gradient_shards()) EXPECT_EQ(shard.dtype(), *options.reduce_dtype);
      }
      if (zero1) {
        alpha::test::sharded_step(dp, 1e-2, 0.5, {0.9, 0.95, 1e-8, 0.1});
        for (const auto& p : mine)
          if (hold_copies) {
            ASSERT_TRUE(p.variable.compute_copy().defined()) << p.name;
            EXPECT_EQ(p.variable.compute_copy().to(DType::f32).to_vector<float>(),
                      p.variable.value().to(DType::bf16).to(DType::f32).to_vector<float>())
                << "rank " << rank << " " << p.name << " step " << step;
          }
      } else {
        // Plain data parallel leaves the averaged gradients: step them the simplest way, by hand.
        for (auto& p : mine) {
          autograd::Variable v = p.variable;
          Tensor update = v.grad().to(Device::cpu()).to(DType::f32);
          std::vector<float> values = v.value().to_vector<float>(), g = update.to_vector<float>();
          for (size_t i = 0; i < values.size(); ++i) values[i] -= 0.1f * g[i];
          v.mutable_value().copy_from(Tensor::from_vector(values, v.value().shape()).to(comm.device()));
        }
      }
    }
    for (const auto& p : mine) params[size_t(rank)].push_back(p.variable.value().to_vector<float>());
  });
  return params;
}

TEST_F(CudaNccl, DataParallelAndZero1MatchTheInProcessCommunicatorOnTheCpu) {
  struct Variant {
    bool zero1, deterministic, hold_copies;
    // bf16: gradients that bf16 holds exactly, against the f32 reduction of the same, so that only the average's
    // rounding differs. (Gradients rounded to bf16 could see the average's sign flip where the ranks' nearly
    // cancel, and AdamW's first steps move an element about ±lr whatever its size: 2·lr apart, seen on 2 H200s.
    // The CPU backend has no bf16 reduction to compare with: it sums no bf16 squares.)
    std::optional<DType> reduce_dtype = std::nullopt;
    // 64: the plain step reduces the 480-byte parameter in place, beside the rest; ZeRO-1 reduces it from its
    // gradient to the ranks whose shards it meets (with 1 MiB buckets, between packed runs).
    int64_t packed_below_bytes = 1 << 20;
    int64_t bucket_bytes = 32;
  };
  for (const Variant& variant :
       {Variant{false, false, false}, Variant{false, false, false, std::nullopt, 64}, Variant{false, true, false},
        Variant{true, false, false}, Variant{true, true, false}, Variant{true, false, true},
        Variant{true, false, false, std::nullopt, 64}, Variant{true, false, true, std::nullopt, 64, 1 << 20},
        Variant{false, false, false, DType::bf16}, Variant{true, false, true, DType::bf16}}) {
    const DataParallelOptions options{variant.bucket_bytes, variant.zero1, variant.deterministic, variant.reduce_dtype,
                                      variant.packed_below_bytes};
    std::vector<std::unique_ptr<Communicator>> nccl(static_cast<size_t>(kWorld));
    test::run_ranks(kWorld, [&](int rank) { nccl[size_t(rank)] = join(rank, milliseconds(60000)); });
    const bool bf16_gradients = variant.reduce_dtype.has_value();
    auto gpu = train_two_steps(
        kWorld, options, [&](int rank) -> Communicator& { return *nccl[size_t(rank)]; }, variant.hold_copies,
        bf16_gradients);
    auto group = std::make_shared<test::InProcessGroup>(kWorld, milliseconds(60000));
    std::vector<std::unique_ptr<test::InProcessCommunicator>> local;
    for (int r = 0; r < kWorld; ++r) local.push_back(std::make_unique<test::InProcessCommunicator>(group, r));
    auto cpu = train_two_steps(
        kWorld, {32, variant.zero1, false}, [&](int rank) -> Communicator& { return *local[size_t(rank)]; }, false,
        bf16_gradients);
    for (int r = 0; r < kWorld; ++r)
      for (size_t p = 0; p < cpu[0].size(); ++p)
        for (size_t i = 0; i < cpu[0][p].size(); ++i)
          ASSERT_NEAR(gpu[size_t(r)][p][i], cpu[0][p][i], variant.reduce_dtype ? 1e-3 : 1e-5)
              << (variant.zero1 ? "ZeRO-1" : "plain") << (variant.deterministic ? ", deterministic" : "")
              << (variant.hold_copies ? ", bf16 copies held" : "") << (variant.reduce_dtype ? ", bf16 reduction" : "")
              << ", packed below " << variant.packed_below_bytes << " bytes, buckets of " << variant.bucket_bytes
              << " rank " << r << " parameter " << p << " [" << i << "]";
    test::run_ranks(kWorld, [&](int rank) { nccl[size_t(rank)].reset(); });
  }
}

// ncclMemFree unmaps at once: a gather buffer whose last reference goes while queued kernels still read it must keep
// its memory until they are done (two 2-GPU training runs once faulted so at their end, the optimiser still reading
// gradients that were views of a bucket).
TEST_F(CudaNccl, AGatherBufferDroppedWhileKernelsStillReadItOutlivesThem) {
  test::run_ranks(kWorld, [&](int rank) {
    std::unique_ptr<Communicator> comm = join(rank, milliseconds(60000));
    const Device device = comm->device();
    constexpr int64_t kBlock = int64_t(1) << 21;  // 16 MiB over the two rows
    constexpr int kReads = 200;                   // milliseconds of queued work
    Tensor buffer = comm->gather_buffer(kBlock, DType::f32);
    buffer.copy_from(Tensor::full({kWorld, kBlock}, 0.5, DType::f32, device));
    Tensor sum = Tensor::zeros({kWorld * kBlock}, DType::f32, device);
    {
      const Tensor rows = buffer.view({-1});
      for (int i = 0; i < kReads; ++i) ops::add_(sum, rows);
    }
    buffer = Tensor();                            // the last reference, while the adds run
    const std::vector<float> got = on_host(sum);  // waits for the device: raises on an illegal address
    EXPECT_EQ(std::count(got.begin(), got.end(), 0.5f * kReads), int64_t(got.size()));
  });
}

TEST_F(CudaNccl, ARankThatStopsParticipatingIsNamedWithinTheTimeout) {
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(kWorld));
  test::run_ranks(kWorld, [&](int rank) { comms[size_t(rank)] = join(rank, milliseconds(3000)); });
  std::atomic<bool> rank0_done = false;
  int failed = -2;
  std::string message;
  auto start = std::chrono::steady_clock::now();
  test::run_ranks(kWorld, [&](int rank) {
    Communicator& comm = *comms[size_t(rank)];
    Tensor value = Tensor::full({1}, 1.0, DType::f32, comm.device());
    comm.all_reduce(value.raw_data(), 1, DType::f32, ReduceOp::sum);
    comm.synchronize();
    if (rank == 1) {  // hangs: joins no further collective until rank 0 has given up
      while (!rank0_done) std::this_thread::sleep_for(milliseconds(10));
      comm.abort("rank 0 gave up");
      return;
    }
    try {
      comm.all_reduce(value.raw_data(), 1, DType::f32, ReduceOp::sum);
      comm.synchronize();
    } catch (const RankFailureError& e) {
      failed = e.failed_rank();
      message = e.what();
    }
    rank0_done = true;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(failed, 1) << message;
  EXPECT_NE(message.find("rank 1 failed"), std::string::npos) << message;
}

// The trainer's step captured in a CUDA graph with its collectives (cuda_graphs on two ranks, or one): the replayed
// steps give the losses, gradient norms and weights of the steps made without the graph, bit for bit, plain and ZeRO-1
// (bf16 compute: ZeRO-1 gathers the held copies), two micro-steps a step (the buckets launched from the last backward).
TEST_F(CudaNcclUpToTwoGpus, TrainingStepsReplayedFromACudaGraphAreTheStepsWithoutIt) {
  constexpr int64_t kSteps = 6;
  alpha::test::TempDir dir;
  for (bool zero1 : {false, true}) {
    std::map<bool, std::filesystem::path> runs;
    for (bool graphs : {false, true}) {
      const std::filesystem::path run_dir = dir / (std::string(zero1 ? "zero1" : "plain") + (graphs ? "-graphs" : ""));
      train::TrainerOptions o = train::tiny_options(run_dir, kSteps);
      o.train.device = "cuda";
      o.train.precision = "bf16";
      o.train.grad_accum = 2;
      o.train.zero1 = zero1;
      o.train.cuda_graphs = graphs;
      if (graphs) o.data = {(runs[false] / "data").string()};
      const int port = free_local_port();
      test::run_ranks(world_, [&](int rank) {
        train::TrainerOptions mine = o;
        mine.communicator = join_group(rank, world_, port, milliseconds(60000));
        train::Trainer(mine).run();
      });
      runs[graphs] = run_dir;
    }
    const std::vector<nlohmann::json> eager = train::metrics_of(runs[false]), graphed = train::metrics_of(runs[true]);
    ASSERT_EQ(eager.size(), size_t(kSteps));
    ASSERT_EQ(graphed.size(), size_t(kSteps));
    for (size_t i = 0; i < eager.size(); ++i) {
      EXPECT_EQ(graphed[i]["loss"].get<double>(), eager[i]["loss"].get<double>()) << "step " << i + 1;
      EXPECT_EQ(graphed[i]["grad_norm"].get<double>(), eager[i]["grad_norm"].get<double>()) << "step " << i + 1;
      EXPECT_EQ(graphed[i].contains("graph_nodes"), i > 0) << "every step after the first is a replay";
    }
    train::expect_same_checkpoint(runs[false], runs[true], false);
  }
}

}  // namespace
}  // namespace alpha::distributed
