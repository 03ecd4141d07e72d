#include "alpha/nn/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "alpha/core/error.h"
#include "alpha/core/philox.h"

namespace alpha::nn {

namespace {

void check_sampling(double temperature, int64_t top_k) {
  if (!(temperature >= 0.0 && std::isfinite(temperature)))
    raise<ConfigError>("sample", "temperature", "a finite value >= 0 (0 = greedy)", std::to_string(temperature));
  if (top_k < 0) raise<ConfigError>("sample", "top_k", "a value >= 0 (0 = no top-k)", std::to_string(top_k));
}

}  // namespace

int32_t sample_from_logits(std::span<const double> logits, double temperature, int64_t top_k, double uniform) {
  check_sampling(temperature, top_k);
  if (logits.empty()) raise<ShapeError>("sample", "logits", "at least one entry", "none");
  int64_t n = int64_t(logits.size());
  // Candidate ids by decreasing logit, ties toward the lower id, cut to the top k.
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  if (temperature == 0.0) return order.front();
  if (top_k > 0 && top_k < n) order.resize(size_t(top_k));

  double max_logit = logits[size_t(order.front())];
  std::vector<double> weights(order.size());
  double total = 0.0;
  for (size_t i = 0; i < order.size(); ++i)
    total += weights[i] = std::exp((logits[size_t(order[i])] - max_logit) / temperature);
  double target = uniform * total, cumulative = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    cumulative += weights[i];
    if (target < cumulative) return order[i];
  }
  return order.back();  // uniform·total rounded up to the total
}

std::vector<int32_t> generate(const GPT& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SamplingOptions& options) {
  check_sampling(options.temperature, options.top_k);
  if (prompt.empty()) raise<ShapeError>("generate", "prompt", "at least one token", "none");
  if (max_new_tokens < 0)
    raise<ConfigError>("generate", "max_new_tokens", "a value >= 0", std::to_string(max_new_tokens));
  const int64_t vocab = model.config().vocab_size;
  if (options.vocab_limit < 0 || options.vocab_limit > vocab)
    raise<ConfigError>("generate", "vocab_limit", "a value in [0, " + std::to_string(vocab) + "] (0 = all)",
                       std::to_string(options.vocab_limit));
  const size_t candidates = size_t(options.vocab_limit > 0 ? options.vocab_limit : vocab);
  autograd::NoGradGuard no_grad;
  const int64_t block_size = model.config().block_size;
  std::vector<int32_t> context = prompt;
  std::vector<int32_t> generated;
  for (int64_t n = 0; n < max_new_tokens; ++n) {
    int64_t T = std::min<int64_t>(int64_t(context.size()), block_size);
    std::vector<int32_t> window(context.end() - T, context.end());
    Tensor ids = Tensor::from_vector(window, {1, T}).to(model.device());
    Tensor logits = model.forward(ids).logits.value().select(0, 0).select(0, T - 1);  // (V)
    std::vector<double> row = logits.to(Device::cpu()).to_vector<double>();
    row.resize(candidates);
    int32_t token =
        sample_from_logits(row, options.temperature, options.top_k, philox_uniform53(options.seed, uint64_t(n)));
    context.push_back(token);
    generated.push_back(token);
  }
  return generated;
}

}  // namespace alpha::nn
