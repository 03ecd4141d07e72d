#include "train/golden_run_util.h"

#include <fstream>

#include <gtest/gtest.h>

#include "alpha/nn/gpt_config.h"
#include "alpha/train/checkpoint.h"

namespace alpha::train {

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

void expect_same_checkpoint(const std::filesystem::path& a, const std::filesystem::path& b, bool same_data_position) {
  CheckpointData ca = load_checkpoint(a), cb = load_checkpoint(b);
  ASSERT_EQ(ca.weights.size(), cb.weights.size());
  for (size_t i = 0; i < ca.weights.size(); ++i) {
    EXPECT_EQ(ca.weights[i].first, cb.weights[i].first);
    EXPECT_EQ(ca.weights[i].second.to_vector<float>(), cb.weights[i].second.to_vector<float>())
        << ca.weights[i].first << " differs";
  }
  ASSERT_EQ(ca.optimizer.size(), cb.optimizer.size());
  for (size_t i = 0; i < ca.optimizer.size(); ++i) {
    EXPECT_EQ(ca.optimizer[i].second.to_vector<float>(), cb.optimizer[i].second.to_vector<float>())
        << ca.optimizer[i].first << " differs";
  }
  if (same_data_position) {
    EXPECT_EQ(ca.state.at("data"), cb.state.at("data"));
  }
}

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

}  // namespace alpha::train
