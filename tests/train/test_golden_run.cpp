// The golden regression run: a fixed-seed 100-step run of the `tiny` config on the CPU must learn
// (loss at step 100 clearly below step 1), stay finite, and resume bit for bit: 50 steps, a
// checkpoint, a fresh trainer resuming, 50 more steps give the same losses and weights as 100 straight.
// tests/cuda/test_cuda_training.cpp runs the same on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "alpha/core/file_io.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/train/checkpoint.h"
#include "alpha/train/trainer.h"
#include "core/file_test_util.h"
#include "train/golden_run_util.h"

namespace alpha::train {
namespace {

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
