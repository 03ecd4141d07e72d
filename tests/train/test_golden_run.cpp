// The golden regression run: a fixed-seed 100-step run of the `tiny` config on the CPU must learn
// (loss at step 100 clearly below step 1), stay finite, and resume bit for bit: 50 steps, a
// checkpoint, a fresh trainer resuming, 50 more steps give the same losses and weights as 100 straight.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "alpha/core/file_io.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/train/checkpoint.h"
#include "alpha/train/trainer.h"
#include "core/file_test_util.h"

namespace alpha::train {
namespace {

std::vector<nlohmann::json> metrics_of(const std::filesystem::path& run_dir) {
  std::vector<nlohmann::json> records;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

TrainerOptions tiny_options(const std::filesystem::path& run_dir, int64_t steps) {
  TrainerOptions o;
  o.model = nn::load_gpt_config("tiny", ALPHA_SOURCE_DIR "/configs");
  o.train.steps = steps;
  o.train.batch_size = 8;
  o.train.warmup_steps = 10;
  o.train.eval_every = 50;
  o.train.save_every = 50;
  o.train.sample_tokens = 0;
  o.run_dir = run_dir;
  o.echo = false;
  return o;
}

// Every weight and optimiser tensor of two checkpoints, compared bit for bit.
void expect_same_checkpoint(const std::filesystem::path& a, const std::filesystem::path& b) {
  CheckpointData ca = load_checkpoint(a), cb = load_checkpoint(b);
  ASSERT_EQ(ca.weights.size(), cb.weights.size());
  for (size_t i = 0; i < ca.weights.size(); ++i) {
    EXPECT_EQ(ca.weights[i].first, cb.weights[i].first);
    EXPECT_EQ(ca.weights[i].second.to_vector<float>(), cb.weights[i].second.to_vector<float>())
        << ca.weights[i].first << " differs";
  }
  ASSERT_EQ(ca.optimizer.size(), cb.optimizer.size());
  for (size_t i = 0; i < ca.optimizer.size(); ++i)
    EXPECT_EQ(ca.optimizer[i].second.to_vector<float>(), cb.optimizer[i].second.to_vector<float>())
        << ca.optimizer[i].first << " differs";
  EXPECT_EQ(ca.state.at("data"), cb.state.at("data"));
}

// Runs `steps` straight in one directory and steps/2 + resume + steps/2 in another, on the same data.
void expect_resume_is_bit_exact(TrainerOptions straight, const test::TempDir& dir) {
  straight.run_dir = dir / "straight";
  Trainer(straight).run();
  TrainerOptions split = straight;
  split.run_dir = dir / "split";
  split.data = {(straight.run_dir / "data").string()};
  Trainer(split).run(straight.train.steps / 2);
  split.resume = true;
  Trainer(split).run();

  std::vector<nlohmann::json> a = metrics_of(straight.run_dir), b = metrics_of(split.run_dir);
  ASSERT_EQ(a.size(), size_t(straight.train.steps));
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i]["val_loss"], b[i]["val_loss"]) << "step " << i + 1;
  }
  expect_same_checkpoint(straight.run_dir, split.run_dir);
}

TEST(GoldenRun, TinyLearnsStaysFiniteAndResumesBitForBit) {
  test::TempDir dir;
  TrainerOptions options = tiny_options(dir.path(), 100);
  expect_resume_is_bit_exact(options, dir);

  std::vector<nlohmann::json> m = metrics_of(dir / "straight");
  for (const auto& r : m) {
    ASSERT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
    ASSERT_TRUE(std::isfinite(r["grad_norm"].get<double>())) << r.dump();
  }
  double first = m.front()["loss"], last = m.back()["loss"];
  EXPECT_NEAR(first, std::log(512.0), 0.3);  // a fresh model predicts about uniformly
  EXPECT_LT(last, first - 2.0) << "loss at step 1 " << first << ", at step 100 " << last;
  EXPECT_LT(m.back()["val_loss"].get<double>(), first - 2.0);
  for (const char* field : {"lr", "clip_coef", "tokens_per_second", "forward_s", "backward_s", "optimizer_s", "ops",
                            "allocations", "peak_bytes"})
    EXPECT_TRUE(m.back().contains(field)) << field;
  EXPECT_GT(m.back()["ops"].get<int64_t>(), 0);
  // keep_last 3 with checkpoints at 50 and 100
  EXPECT_EQ(list_checkpoints(dir / "straight").size(), 2u);
}

TEST(GoldenRun, ResumeIsBitExactWithDropoutAndAccumulation) {
  test::TempDir dir;
  TrainerOptions options = tiny_options(dir.path(), 12);
  options.model.dropout = 0.1;
  options.model.n_layer = 1;
  options.train.grad_accum = 2;
  options.train.batch_size = 4;
  options.train.eval_every = 4;
  options.train.save_every = 3;
  options.train.warmup_steps = 2;
  expect_resume_is_bit_exact(options, dir);
}

TEST(GoldenRun, ResumeWithoutACheckpointIsAClearError) {
  test::TempDir dir;
  EXPECT_THROW(saved_configs(dir.path()), ConfigError);
}

}  // namespace
}  // namespace alpha::train
