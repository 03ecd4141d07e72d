// Sampling: the draw from one row of logits (greedy, temperature, top-k, frequencies), the Philox
// uniforms, and generation (determinism per seed, context cropping, no recorded graph, errors).
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "alpha/autograd/variable.h"
#include "alpha/core/philox.h"
#include "alpha/nn/sampling.h"
#include "nn/nn_helpers.h"
#include "support/checks.h"

namespace alpha::nn {
namespace {

TEST(GPTSampling, GreedyAndTopOneTakeTheArgmaxWithTiesToTheLowerId) {
  std::vector<double> logits = {0.5, 2.0, -1.0, 2.0, 1.5};
  for (double u : {0.0, 0.3, 0.999}) {
    EXPECT_EQ(sample_from_logits(logits, 0.0, 0, u), 1);
    EXPECT_EQ(sample_from_logits(logits, 1.0, 1, u), 1);
  }
}

// Over a fine grid of uniforms the draw frequencies are the softmax of logits/temperature restricted to
// the top k (within one grid step per token).
TEST(GPTSampling, DrawFrequenciesFollowTheTemperedTopKSoftmax) {
  std::vector<double> logits = {0.3, -1.2, 2.0, 0.9, 1.7, -0.4};
  const int grid = 20000;
  for (double temperature : {0.5, 1.0, 2.0})
    for (int64_t top_k : {0, 3}) {
      SCOPED_TRACE("temperature " + std::to_string(temperature) + ", top_k " + std::to_string(top_k));
      std::vector<double> want(logits.size(), 0.0);
      std::vector<size_t> kept = {0, 1, 2, 3, 4, 5};
      if (top_k == 3) kept = {2, 4, 3};
      double total = 0;
      for (size_t i : kept) total += want[i] = std::exp(logits[i] / temperature);
      for (double& w : want) w /= total;
      std::vector<int> counts(logits.size(), 0);
      for (int g = 0; g < grid; ++g) ++counts[size_t(sample_from_logits(logits, temperature, top_k, (g + 0.5) / grid))];
      for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(counts[i] / double(grid), want[i], 1.0 / grid) << i;
    }
}

TEST(GPTSampling, PhiloxUniformsAreInRangeAndUniform) {
  uint64_t seed = test::fresh_seed();
  const int n = 100000;
  double sum = 0;
  int low_quarter = 0;
  for (int i = 0; i < n; ++i) {
    double u = philox_uniform53(seed, uint64_t(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    low_quarter += u < 0.25;
  }
  // Standard errors: 1/√(12n) ≈ 0.0009 for the mean, √(3/16/n) ≈ 0.0014 for the quarter.
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(low_quarter / double(n), 0.25, 0.007);
  EXPECT_EQ(philox_uniform53(seed, 17), philox_uniform53(seed, 17));
}

GPTConfig sampling_config() {
  GPTConfig c = test::micro_config();
  c.init_std = 1.0;  // peaked predictions, so greedy and sampled sequences differ
  return c;
}

TEST(GPTSampling, GenerationIsDeterministicPerSeedAndRecordsNothing) {
  GPT model(sampling_config());
  std::vector<int32_t> prompt = {1, 2, 3};
  SamplingOptions options{.temperature = 1.0, .top_k = 0, .seed = 11};
  std::vector<int32_t> a = generate(model, prompt, 20, options);
  EXPECT_EQ(autograd::tape_size(), 0u);
  EXPECT_EQ(a.size(), 20u);
  for (int32_t t : a) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, model.config().vocab_size);
  }
  EXPECT_EQ(generate(model, prompt, 20, options), a);
  options.seed = 12;
  EXPECT_NE(generate(model, prompt, 20, options), a);
  EXPECT_TRUE(generate(model, prompt, 0, options).empty());
}

// Greedy generation equals taking the argmax of the model's own last-position logits, step by step,
// and prompts longer than the context are cropped to its last block_size tokens.
TEST(GPTSampling, GreedyGenerationFollowsTheArgmaxOverACroppedContext) {
  GPT model(sampling_config());
  const int64_t block = model.config().block_size;
  Tensor prompt_ids = test::random_ids({block + 5}, model.config().vocab_size);
  std::vector<int32_t> prompt = prompt_ids.to_vector<int32_t>();
  std::vector<int32_t> got = generate(model, prompt, 6, {.temperature = 0.0});

  std::vector<int32_t> context = prompt;
  autograd::NoGradGuard no_grad;
  for (int32_t token : got) {
    std::vector<int32_t> window(context.end() - block, context.end());
    Tensor logits =
        model.forward(Tensor::from_vector(window, {1, block})).logits.value().select(0, 0).select(0, block - 1);
    EXPECT_EQ(token, sample_from_logits(logits.to_vector<double>(), 0.0, 0, 0.5));
    context.push_back(token);
  }
  EXPECT_EQ(generate(model, prompt, 6, {.temperature = 0.7, .top_k = 1, .seed = 5}), got);
}

// A model vocabulary padded past the tokenizer's: ids at or above vocab_limit are never drawn.
TEST(GPTSampling, VocabLimitKeepsDrawsBelowIt) {
  GPT model(sampling_config());
  const int64_t limit = model.config().vocab_size / 4;
  for (uint64_t seed = 0; seed < 5; ++seed)
    for (int32_t t : generate(model, {1, 2}, 30, {.temperature = 2.0, .seed = seed, .vocab_limit = limit}))
      ASSERT_LT(t, limit);
}

TEST(GPTSampling, RejectsBadArguments) {
  GPT model(sampling_config());
  EXPECT_ALPHA_ERROR(generate(model, {}, 3, {}), ShapeError, "generate", "prompt");
  EXPECT_ALPHA_ERROR(generate(model, {1}, -1, {}), ConfigError, "generate", "max_new_tokens");
  EXPECT_ALPHA_ERROR(generate(model, {1}, 3, {.temperature = -1.0}), ConfigError, "temperature");
  EXPECT_ALPHA_ERROR(generate(model, {1}, 3, {.top_k = -2}), ConfigError, "top_k");
  EXPECT_ALPHA_ERROR(generate(model, {1, 99}, 3, {}), ValueError, "99");
  EXPECT_ALPHA_ERROR(generate(model, {1}, 3, {.vocab_limit = model.config().vocab_size + 1}), ConfigError,
                     "generate", "vocab_limit");
}

}  // namespace
}  // namespace alpha::nn
