// The trainer with each activation recomputation level (TrainConfig::recompute): the `tiny` config with dropout
// and gradient accumulation gives the losses, gradient norms, weights and optimiser state of recompute "none" bit
// for bit, while metrics.jsonl reports a lower peak memory every step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "alpha/train/trainer.h"
#include "core/file_test_util.h"
#include "train/golden_run_util.h"

namespace alpha::train {
namespace {

TEST(RecomputeTraining, LevelsTrainBitForBitLikeNoneWithLessPeakMemory) {
  test::TempDir dir;
  TrainerOptions none = tiny_options(dir / "none", 3);
  none.model.dropout = 0.1;
  none.train.grad_accum = 2;
  none.train.batch_size = 4;
  none.train.eval_every = 0;
  Trainer(none).run();
  std::vector<nlohmann::json> plain = metrics_of(none.run_dir);
  ASSERT_EQ(plain.size(), 3u);

  for (const char* level : {"ln_gelu", "block"}) {
    SCOPED_TRACE(level);
    TrainerOptions options = none;
    options.train.recompute = level;
    options.run_dir = dir / level;
    options.data = {(none.run_dir / "data").string()};
    Trainer(options).run();
    std::vector<nlohmann::json> m = metrics_of(options.run_dir);
    ASSERT_EQ(m.size(), plain.size());
    for (size_t i = 0; i < m.size(); ++i) {
      EXPECT_EQ(m[i]["loss"].get<double>(), plain[i]["loss"].get<double>()) << "step " << i + 1;
      EXPECT_EQ(m[i]["grad_norm"].get<double>(), plain[i]["grad_norm"].get<double>()) << "step " << i + 1;
      EXPECT_LT(m[i]["peak_bytes"].get<uint64_t>(), plain[i]["peak_bytes"].get<uint64_t>()) << "step " << i + 1;
    }
    expect_same_checkpoint(none.run_dir, options.run_dir);
  }
}

}  // namespace
}  // namespace alpha::train
