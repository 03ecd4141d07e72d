// Stochastic rounding in training, on the CPU (the trainer's bf16/f16 runs need a GPU: tests/cuda): a toy run
// whose loss reads the parameters' held bf16 compute copies, stepped by train::AdamW with stochastic rounding,
// resumes bit for bit from its exported state when the copies are restored (keep_stochastic_compute_copies),
// and not without them; ZeRO-1 over the in-process communicator leaves every rank the copies the unsharded
// step would write from the same weights (the whole tensor's bits); the config refuses the option at f32.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "alpha/autograd/functions.h"
#include "alpha/distributed/data_parallel.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/optim.h"
#include "alpha/train/optimizer.h"
#include "alpha/train/train_config.h"
#include "distributed/in_process_communicator.h"
#include "support/checks.h"
#include "support/data_parallel_steps.h"

namespace alpha::train {
namespace {

using autograd::Variable;

constexpr uint64_t kSeed = 2024;
constexpr DType kCompute = DType::bf16;

std::vector<nn::NamedParameter> toy_parameters(const std::vector<Tensor>& values) {
  std::vector<nn::NamedParameter> params;
  for (size_t k = 0; k < values.size(); ++k) {
    std::string name = std::string("p").append(std::to_string(k));
    params.push_back({name, Variable(values[k].clone(), true, name), k != 1});
  }
  return params;
}

// Each tensor large enough that its stochastically rounded copy differs from the nearest one for any fresh inputs
// (a 5-element tensor's matched the nearest in about one draw of four, which made the test depend on the order
// the tests ran in).
std::vector<Tensor> toy_values() { return {test::random({7, 13}), test::random({501}), test::random({3, 300})}; }

// One step of the toy run: the gradient of ½‖copy − target‖² through the bf16 compute copy the forward would
// read (autograd::cast's: the held one, or a conversion to nearest when none is held), then AdamW's step.
void toy_step(std::vector<nn::NamedParameter>& params, AdamW& optimizer, int64_t step) {
  for (size_t k = 0; k < params.size(); ++k) {
    Variable p = params[k].variable;
    Tensor copy = autograd::cast(p, kCompute).value().to(DType::f32);
    Tensor target = Tensor::full(copy.shape(), 0.25 * double(k + 1) * (step % 2 ? 1 : -1), DType::f32);
    p.clear_grad();
    autograd::backward(autograd::sum(autograd::mul(p, Variable(ops::add(copy, ops::scale(target, -1.0))))));
  }
  autograd::clear_tape();
  optimizer.step(1e-3);
}

struct ToyRun {
  std::vector<nn::NamedParameter> params;
  AdamW optimizer;
  ToyRun(const std::vector<Tensor>& values, std::optional<uint64_t> seed)
      : params(toy_parameters(values)), optimizer(params, AdamWOptions{0.9, 0.95, 1e-8, 0.1, seed}) {}
  void run(int64_t from, int64_t to) {
    for (int64_t step = from; step < to; ++step) toy_step(params, optimizer, step);
  }
};

// The split run: `first` steps, the state exported, a fresh run over the saved weights (no copies held) with
// the state loaded and, if `restore`, the copies restored; then the rest.
ToyRun resumed_run(const std::vector<Tensor>& start, int64_t first, int64_t total, bool restore) {
  ToyRun a(start, kSeed);
  a.run(0, first);
  std::vector<Tensor> saved_values;
  for (const auto& p : a.params) saved_values.push_back(p.variable.value().clone());
  std::vector<NamedTensor> state;
  for (const auto& t : a.optimizer.state_tensors()) state.push_back({t.name, t.tensor.clone()});
  ToyRun b(saved_values, kSeed);
  b.optimizer.load_state(state, a.optimizer.step_count());
  if (restore) keep_stochastic_compute_copies(b.params, kCompute, kSeed, b.optimizer.step_count());
  b.run(first, total);
  return b;
}

TEST(StochasticRoundingTraining, ResumesBitForBitWithTheCopiesRestored) {
  const std::vector<Tensor> start = toy_values();
  ToyRun straight(start, kSeed);
  straight.run(0, 8);
  ToyRun nearest(start, std::nullopt);
  nearest.run(0, 8);
  ToyRun resumed = resumed_run(start, 3, 8, true), without = resumed_run(start, 3, 8, false);
  bool rounding_changed_the_run = false, restoring_mattered = false;
  for (size_t k = 0; k < start.size(); ++k) {
    SCOPED_TRACE(straight.params[k].name);
    const Variable& s = straight.params[k].variable;
    EXPECT_TRUE(test::bit_equal(resumed.params[k].variable.value(), s.value()));
    EXPECT_TRUE(test::bit_equal(resumed.params[k].variable.compute_copy(), s.compute_copy()));
    for (size_t slot : {k, k + start.size()})  // m, then v
      EXPECT_TRUE(test::bit_equal(resumed.optimizer.state_tensors()[slot].tensor,
                                  straight.optimizer.state_tensors()[slot].tensor));
    // The copy is the step's stochastic rounding of the master, not its rounding to nearest.
    EXPECT_FALSE(test::bit_equal(s.compute_copy(), s.value().to(kCompute)));
    rounding_changed_the_run |= !test::bit_equal(nearest.params[k].variable.value(), s.value());
    restoring_mattered |= !test::bit_equal(without.params[k].variable.value(), s.value());
  }
  EXPECT_TRUE(rounding_changed_the_run) << "the loss reads the copies: their rounding steers the run";
  EXPECT_TRUE(restoring_mattered) << "without the restored copies the first resumed step computes from others";
}

TEST(StochasticRoundingTraining, NothingToRestoreBeforeTheFirstStep) {
  std::vector<nn::NamedParameter> params = toy_parameters(toy_values());
  keep_stochastic_compute_copies(params, kCompute, kSeed, 0);
  for (const auto& p : params) EXPECT_FALSE(p.variable.compute_copy().defined()) << p.name;
}

// ZeRO-1 over the in-process communicator, on parameters of odd sizes whose shards split them (the same values on
// every rank), each holding a compute copy of copy_dtype(i) (none for nullopt): three attempts, each averaging fresh
// per-rank gradients and then stepping (step_count() must be 2 after them), with the step's stochastic rounding
// seed; the second attempt is skipped on the device (a NaN loss), and must move neither the values nor the copies.
// Returns each rank's parameters, every value gathered.
const std::vector<Shape> kShardedShapes{{3, 5}, {7}, {40, 3}, {1}, {6, 2}};

std::vector<std::vector<nn::NamedParameter>> train_sharded(
    int world, std::optional<uint64_t> seed, const std::function<std::optional<DType>(size_t)>& copy_dtype) {
  std::vector<std::vector<nn::NamedParameter>> replicas(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < kShardedShapes.size(); ++i) {
      std::string name = std::string("p").append(std::to_string(i));
      Variable v(Tensor::normal(kShardedShapes[i], 0.0, 1.0, 100 + i), true, name);
      if (std::optional<DType> dtype = copy_dtype(i)) autograd::cast(v, *dtype);
      replicas[size_t(r)].push_back({name, v, i % 2 == 0});
    }
  autograd::clear_tape();
  auto group = std::make_shared<distributed::test::InProcessGroup>(world, std::chrono::milliseconds(10000));
  distributed::test::run_ranks(world, [&](int rank) {
    distributed::test::InProcessCommunicator comm(group, rank);
    std::vector<nn::NamedParameter>& mine = replicas[size_t(rank)];
    distributed::DataParallel dp(comm, mine, {/*bucket_bytes=*/32, true});
    for (int attempt = 0; attempt < 3; ++attempt) {
      for (size_t i = 0; i < mine.size(); ++i)
        autograd::backward(mine[i].variable,
                           Tensor::normal(kShardedShapes[i], 0.0, 1.0, 1000 * (rank + 1) + i + 10 * attempt));
      alpha::test::reduce_gradients(dp);
      const bool skip = attempt == 1;
      std::vector<Tensor> values, copies;
      for (const auto& p : mine) {
        values.push_back(p.variable.value().clone());
        copies.push_back(p.variable.compute_copy().defined() ? p.variable.compute_copy().clone() : Tensor());
      }
      const Tensor norm = dp.queue_sharded_norm();
      const Tensor losses = Tensor::from_vector(std::vector<float>{skip ? NAN : 1.0f}, {1});
      dp.queue_sharded_step(1e-2, ops::step_guard(norm, losses, 1.0, 0.0), {0.9, 0.95, 1e-8, 0.1, seed});
      comm.synchronize();
      dp.settle_sharded_step(!skip);
      dp.complete_parameters();
      if (!skip) continue;
      for (size_t k = 0; k < mine.size(); ++k) {
        EXPECT_TRUE(alpha::test::bit_equal(mine[k].variable.value(), values[k])) << "parameter " << k;
        // A skipped first step leaves the copies the casts, rounded to nearest (not the master rounded
        // stochastically with step 0's bits).
        if (copies[k].defined()) {
          EXPECT_TRUE(alpha::test::bit_equal(mine[k].variable.compute_copy(), copies[k])) << "parameter " << k;
        }
      }
    }
    EXPECT_EQ(dp.step_count(), 2);
  });
  return replicas;
}

// The copy the unsharded step writes beside value v at step 2: rounded to nearest, or stochastically with tensor k's
// bits of that step and whole-tensor indices.
Tensor unsharded_copy(const Tensor& value, DType dtype, std::optional<uint64_t> seed, size_t k) {
  if (!seed) return value.to(dtype);
  std::vector<Tensor> values = {value}, copies = {Tensor::zeros(value.shape(), dtype)};
  ops::stochastic_round(values, copies, 2, {{*seed, uint32_t(k), 0}});
  return copies[0];
}

// Copies of two dtypes, and a parameter holding none: the values are gathered, and each copy is rounded again.
TEST(StochasticRoundingTraining, Zero1RoundsEachCopyAsTheUnshardedStepDoes) {
  for (int world : {1, 2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const auto replicas = train_sharded(world, kSeed, [](size_t i) {
      return i == 3 ? std::nullopt : std::optional<DType>(i % 2 ? DType::f16 : kCompute);
    });
    for (int r = 0; r < world; ++r)
      for (size_t k = 0; k < kShardedShapes.size(); ++k) {
        const Variable& v = replicas[size_t(r)][k].variable;
        if (k == 3) {
          EXPECT_FALSE(v.compute_copy().defined()) << "a parameter that held no copy gets none";
          continue;
        }
        ASSERT_TRUE(v.compute_copy().defined()) << k;
        EXPECT_TRUE(test::bit_equal(v.compute_copy(), unsharded_copy(v.value(), v.compute_copy().dtype(), kSeed, k)))
            << "rank " << r << " parameter " << k;
        EXPECT_TRUE(test::bit_equal(v.compute_copy(), replicas[0][k].variable.compute_copy())) << "same on every rank";
      }
  }
}

// When every parameter holds a copy of one dtype (the trainer's bf16 runs), the step writes this rank's part of the
// copies beside the update and all-gathers them: every copy is the one the unsharded step writes (to nearest, or
// stochastically), the same on every rank; the values are, bit for bit, those of the path that gathers the values
// (no copies held).
TEST(StochasticRoundingTraining, Zero1WithEveryCopyHeldGathersTheCopiesTheUnshardedStepWrites) {
  for (DType copy_dtype : {kCompute, DType::f16})  // f16: the copies gathered as f16 (a collective dtype too)
    for (std::optional<uint64_t> seed : {std::optional<uint64_t>(), std::optional<uint64_t>(kSeed)})
      for (int world : {1, 2, 3, 4}) {
        SCOPED_TRACE(std::string(dtype_name(copy_dtype)) + " copies, world " + std::to_string(world) +
                     (seed ? ", stochastic rounding" : ", to nearest"));
        const auto held = train_sharded(world, seed, [&](size_t) { return std::optional<DType>(copy_dtype); });
        const auto bare = train_sharded(world, seed, [](size_t) { return std::nullopt; });
        for (int r = 0; r < world; ++r)
          for (size_t k = 0; k < kShardedShapes.size(); ++k) {
            const Variable& v = held[size_t(r)][k].variable;
            EXPECT_TRUE(test::bit_equal(v.value(), bare[size_t(r)][k].variable.value()))
                << "rank " << r << " parameter " << k;
            ASSERT_TRUE(v.compute_copy().defined()) << k;
            EXPECT_EQ(v.compute_copy().dtype(), copy_dtype);
            EXPECT_TRUE(test::bit_equal(v.compute_copy(), unsharded_copy(v.value(), copy_dtype, seed, k)))
                << "rank " << r << " parameter " << k;
            EXPECT_TRUE(test::bit_equal(v.compute_copy(), held[0][k].variable.compute_copy())) << "same on every rank";
          }
      }
}

// Gathering the copies leaves each rank's values outside its shards as they were until complete_parameters(),
// which gathers them; a step after a copy was replaced meanwhile (a forward would have converted a stale value)
// is refused, naming the parameter.
TEST(StochasticRoundingTraining, Zero1LeavesOtherShardsValuesStaleUntilCompleteParameters) {
  constexpr int kWorld = 2;
  auto group = std::make_shared<distributed::test::InProcessGroup>(kWorld, std::chrono::milliseconds(10000));
  std::vector<std::vector<float>> stale(kWorld), gathered(kWorld);
  std::vector<int64_t> shard_numel(kWorld);
  distributed::test::run_ranks(kWorld, [&](int rank) {
    distributed::test::InProcessCommunicator comm(group, rank);
    std::vector<nn::NamedParameter> mine;
    Variable v(Tensor::normal({40, 3}, 0.0, 1.0, 7), true, "w");
    autograd::cast(v, kCompute);
    autograd::clear_tape();
    mine.push_back({"w", v, true});
    distributed::DataParallel dp(comm, mine, {/*bucket_bytes=*/32, true});
    shard_numel[size_t(rank)] = dp.buckets()[0].shard_numel;
    auto step = [&] {
      autograd::backward(v, Tensor::normal({40, 3}, 0.0, 1.0, 100 + rank));
      alpha::test::reduce_gradients(dp);
      const Tensor norm = dp.queue_sharded_norm();
      dp.queue_sharded_step(1e-2, ops::step_guard(norm, Tensor::zeros({1}, DType::f32), 1.0, 0.0),
                            {0.9, 0.95, 1e-8, 0.1});
      comm.synchronize();
      dp.settle_sharded_step(true);
    };
    step();
    stale[size_t(rank)] = v.value().to_vector<float>();
    dp.complete_parameters();
    gathered[size_t(rank)] = v.value().to_vector<float>();
    EXPECT_TRUE(alpha::test::bit_equal(v.compute_copy(), v.value().to(kCompute))) << "the copy was current already";
    step();
    v.mutable_value();  // drops the copy: the next forward would convert the stale value
    EXPECT_ALPHA_ERROR(step(), ValueError, "[DataParallel::queue_sharded_step]", "'w'", "complete_parameters()");
  });
  EXPECT_EQ(gathered[0], gathered[1]);
  // 120 elements in one bucket padded to 128, 64 a shard: rank 0's shard holds elements 0-63, rank 1's 64-119 (and
  // the padding). Each rank's own elements are updated; the other rank's are still the initial values.
  ASSERT_EQ(shard_numel, (std::vector<int64_t>{64, 64}));
  for (int rank = 0; rank < kWorld; ++rank) {
    const size_t first = rank == 0 ? 0 : 64, other = rank == 0 ? 64 : 0;
    const size_t count = rank == 0 ? 64 : 56, other_count = rank == 0 ? 56 : 64;
    for (size_t i = 0; i < count; ++i)
      EXPECT_EQ(stale[size_t(rank)][first + i], gathered[0][first + i]) << "rank " << rank << " [" << first + i << "]";
    for (size_t i = 0; i < other_count; ++i)
      EXPECT_NE(stale[size_t(rank)][other + i], gathered[0][other + i]) << "rank " << rank << " [" << other + i << "]";
  }
}

TEST(StochasticRoundingTraining, ConfigRefusesItWithoutALowPrecisionCopy) {
  TrainConfig t;
  t.stochastic_rounding = true;
  EXPECT_ALPHA_ERROR(t.validate(), ConfigError, "'stochastic_rounding'", "precision \"f32\"", "bf16 or f16");
  t.precision = "bf16";
  t.device = "cuda";
  t.validate();
  EXPECT_TRUE(TrainConfig::from_json(t.to_json()).stochastic_rounding);
  EXPECT_FALSE(TrainConfig::from_json(nlohmann::json::object()).stochastic_rounding) << "off by default";
  EXPECT_ALPHA_ERROR(TrainConfig::from_json({{"stochastic_rounding", "yes"}}), ConfigError, "stochastic_rounding");
  t.hold_compute_copies = false;  // the rounded weights are the held copies
  EXPECT_ALPHA_ERROR(t.validate(), ConfigError, "'hold_compute_copies'", "stochastic_rounding");
  t.stochastic_rounding = false;
  t.validate();
  EXPECT_FALSE(TrainConfig::from_json(t.to_json()).hold_compute_copies);
  EXPECT_TRUE(TrainConfig::from_json(nlohmann::json::object()).hold_compute_copies) << "held by default";
}

}  // namespace
}  // namespace alpha::train
