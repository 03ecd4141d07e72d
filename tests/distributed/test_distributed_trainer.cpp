// The trainer as two ranks (threads of this process, through the in-process communicator) against one
// rank with the same global batch: the same losses, with and without ZeRO-1 (bit for bit against one rank that
// accumulates the ranks' batches); only rank 0 logs; ZeRO-1
// checkpoints hold one optimizer shard per rank and resume bit for bit; a resume with another world size
// fails naming it. ZeRO-1 on 4 and 8 ranks too (nothing is tied to two: issue 12's machines).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include "alpha/distributed/data_parallel.h"
#include "alpha/train/checkpoint.h"
#include "alpha/train/optimizer_shards.h"
#include "distributed/in_process_communicator.h"
#include "support/checks.h"
#include "train/golden_run_util.h"

namespace alpha::train {
namespace {

using distributed::test::InProcessCommunicator;
using distributed::test::InProcessGroup;
using distributed::test::run_ranks;
namespace fs = std::filesystem;

constexpr int64_t kSteps = 6;

TrainerOptions options_for(const fs::path& run_dir, int64_t batch_size, int64_t steps = kSteps) {
  TrainerOptions o = tiny_options(run_dir, steps);
  o.train.batch_size = batch_size;
  o.train.grad_accum = 2;  // the reduction runs once per step, after the last micro-step
  o.train.eval_every = 3;
  o.train.save_every = 3;
  return o;
}

// Trains `options` as `world` ranks on threads; rank r's options get its communicator.
void train_ranks(int world, const TrainerOptions& options, std::optional<int64_t> stop_at = std::nullopt) {
  auto group = std::make_shared<InProcessGroup>(world, std::chrono::seconds(60));
  run_ranks(world, [&](int rank) {
    TrainerOptions mine = options;
    mine.communicator = std::make_shared<InProcessCommunicator>(group, rank);
    Trainer(mine).run(stop_at);
  });
}

void expect_same_losses(const fs::path& one, const fs::path& two) {
  std::vector<nlohmann::json> a = metrics_of(one), b = metrics_of(two);
  ASSERT_EQ(a.size(), size_t(kSteps));
  ASSERT_EQ(b.size(), size_t(kSteps)) << "one metrics line per step: only rank 0 logs";
  for (size_t i = 0; i < a.size(); ++i) {
    double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_NEAR(lb, la, 1e-4 * std::abs(la)) << "step " << i + 1;
    EXPECT_NEAR(b[i]["grad_norm"].get<double>(), a[i]["grad_norm"].get<double>(),
                1e-3 * a[i]["grad_norm"].get<double>())
        << "step " << i + 1;
  }
}

TEST(DistributedTrainer, TwoRanksMatchOneRankWithTheSameGlobalBatch) {
  test::TempDir dir;
  Trainer(options_for(dir / "one", 8)).run();
  TrainerOptions two = options_for(dir / "two", 4);  // 2 ranks x 4 sequences = 8
  two.data = {(dir / "one" / "data").string()};
  train_ranks(2, two);
  expect_same_losses(dir / "one", dir / "two");
  CheckpointData ckpt = load_checkpoint(dir / "two");
  EXPECT_EQ(ckpt.state["parallel"]["world_size"], 2);
  EXPECT_FALSE(ckpt.optimizer.empty()) << "without ZeRO-1 rank 0 writes the whole optimizer state";
}

// --profile on two ranks: both line up (one barrier) before the profiled step, rank 0 profiles it. Three
// steps (the default profiled step is the third), without and with the profile.
TEST(DistributedTrainer, RanksLineUpBeforeTheProfiledStepAndRankZeroProfilesIt) {
  constexpr int64_t kProfiledRun = 3;
  test::TempDir dir;
  std::map<bool, std::vector<int64_t>> collectives;
  for (bool profile : {false, true}) {
    TrainerOptions two = options_for(dir / (profile ? "profiled" : "plain"), 4, kProfiledRun);
    if (profile) two.data = {(dir / "plain" / "data").string()};
    two.profile = profile;
    collectives[profile].resize(2);
    auto group = std::make_shared<InProcessGroup>(2, std::chrono::seconds(60));
    run_ranks(2, [&](int rank) {
      TrainerOptions mine = two;
      auto comm = std::make_shared<InProcessCommunicator>(group, rank);
      mine.communicator = comm;
      Trainer(mine).run();
      collectives[profile][size_t(rank)] = comm->collectives();
    });
  }
  for (size_t rank = 0; rank < 2; ++rank) EXPECT_EQ(collectives[true][rank], collectives[false][rank] + 1);
  EXPECT_TRUE(fs::exists(dir / "profiled" / "profile.json"));
  EXPECT_FALSE(fs::exists(dir / "plain" / "profile.json"));
  std::vector<nlohmann::json> m = metrics_of(dir / "profiled");
  ASSERT_EQ(m.size(), size_t(kProfiledRun));
  EXPECT_TRUE(m[2].value("profiled", false)) << "the third step, as on one rank";
}

// Two ranks of batch B against one rank accumulating two micro-batches of B (the same sequences: a step's
// windows are rank 0's, then rank 1's): the ranks' average adds the two whole gradients once, as the
// accumulation does, so losses, gradient norms, weights and optimizer state agree bit for bit.
TEST(DistributedTrainer, TwoRanksEqualOneRankAccumulatingTheirBatchesBitForBit) {
  test::TempDir dir;
  Trainer(options_for(dir / "one", 4)).run();  // grad_accum 2
  TrainerOptions two = options_for(dir / "two", 4);
  two.train.grad_accum = 1;
  two.data = {(dir / "one" / "data").string()};
  train_ranks(2, two);
  std::vector<nlohmann::json> a = metrics_of(dir / "one"), b = metrics_of(dir / "two");
  ASSERT_EQ(a.size(), size_t(kSteps));
  ASSERT_EQ(b.size(), size_t(kSteps));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
  expect_same_checkpoint(dir / "one", dir / "two", false);
}

TEST(DistributedTrainer, Zero1MatchesOneRankWritesAShardPerRankAndResumesBitForBit) {
  test::TempDir dir;
  Trainer(options_for(dir / "one", 8)).run();
  TrainerOptions zero1 = options_for(dir / "zero1", 4);
  zero1.train.zero1 = true;
  zero1.train.bucket_mb = 1;
  zero1.data = {(dir / "one" / "data").string()};
  train_ranks(2, zero1);
  expect_same_losses(dir / "one", dir / "zero1");
  CheckpointData ckpt = load_checkpoint(dir / "zero1");
  EXPECT_TRUE(ckpt.optimizer.empty()) << "under ZeRO-1 the state is in the shards";
  for (int rank = 0; rank < 2; ++rank) {
    OptimizerShard shard = read_optimizer_shard(dir / "zero1", kSteps, rank, 2);
    EXPECT_EQ(shard.optimizer_step, kSteps);
    EXPECT_FALSE(shard.tensors.empty());
  }
  EXPECT_THROW(read_optimizer_shard(dir / "zero1", kSteps, 1, 3), IOError) << "written for another world size";

  // Half the steps, then a resume: the same losses and weights, bit for bit.
  TrainerOptions half = zero1;
  half.run_dir = dir / "resumed";
  train_ranks(2, half, kSteps / 2);
  half.resume = true;
  train_ranks(2, half);
  std::vector<nlohmann::json> straight = metrics_of(dir / "zero1"), resumed = metrics_of(dir / "resumed");
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(resumed[i]["loss"], straight[i]["loss"]) << "step " << i + 1;
  CheckpointData a = load_checkpoint(dir / "zero1"), b = load_checkpoint(dir / "resumed");
  for (size_t i = 0; i < a.weights.size(); ++i)
    EXPECT_EQ(a.weights[i].second.to_vector<float>(), b.weights[i].second.to_vector<float>()) << a.weights[i].first;
}

TEST(DistributedTrainer, Zero1OnFourAndEightRanksMatchesOneRank) {
  test::TempDir dir;
  Trainer(options_for(dir / "one", 8)).run();
  for (int world : {4, 8}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const fs::path run = dir / ("zero1_" + std::to_string(world));
    TrainerOptions zero1 = options_for(run, 8 / world);  // the same global batch of 8 sequences
    zero1.train.zero1 = true;
    zero1.train.bucket_mb = 1;
    zero1.data = {(dir / "one" / "data").string()};
    train_ranks(world, zero1);
    expect_same_losses(dir / "one", run);
    EXPECT_EQ(load_checkpoint(run).state["parallel"]["world_size"], world);
    for (int rank = 0; rank < world; ++rank)
      EXPECT_FALSE(read_optimizer_shard(run, kSteps, rank, world).tensors.empty()) << "rank " << rank;
  }
}

TEST(DistributedTrainer, ResumingWithAnotherWorldSizeFailsNamingIt) {
  test::TempDir dir;
  TrainerOptions two = options_for(dir / "run", 4, 3);
  train_ranks(2, two);
  TrainerOptions one = two;
  one.resume = true;
  try {
    Trainer trainer(one);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("world size"), std::string::npos) << message;
    EXPECT_NE(message.find("--gpus 2"), std::string::npos) << message;
  }
}

// --reduce-precision bf16 (the gradients rounded to bf16 for the collectives) needs bf16 weights with held copies,
// which AdamW reads beside the bf16 gradients, and no deterministic reduction; the config names what it expects.
TEST(DistributedTrainer, Bf16ReductionNeedsBf16ComputeWithHeldCopiesAndNoDeterministicReduce) {
  TrainConfig t;
  t.reduce_precision = "f16";
  EXPECT_ALPHA_ERROR(t.validate(), ConfigError, "'reduce_precision'", "\"f32\" or \"bf16\"");
  t.reduce_precision = "bf16";
  EXPECT_ALPHA_ERROR(t.validate(), ConfigError, "'reduce_precision'", "precision is \"bf16\"");
  t.precision = "bf16";
  t.device = "cuda";
  t.validate();
  EXPECT_EQ(TrainConfig::from_json(t.to_json()).reduce_precision, "bf16");
  EXPECT_EQ(TrainConfig::from_json(nlohmann::json::object()).reduce_precision, "f32") << "f32 by default";
  t.hold_compute_copies = false;
  EXPECT_ALPHA_ERROR(t.validate(), ConfigError, "'reduce_precision'", "hold_compute_copies");
  t.hold_compute_copies = true;
  t.deterministic_reduce = true;
  EXPECT_ALPHA_ERROR(t.validate(), ConfigError, "'reduce_precision'", "deterministic_reduce");
}

}  // namespace
}  // namespace alpha::train
