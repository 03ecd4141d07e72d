// Autoregressive sampling from a GPT. Randomness comes from Philox keyed by the caller's seed (draw n
// uses counter n), never from std:: distributions, whose outputs differ between standard libraries:
// the same model, prompt and options give the same tokens everywhere.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "alpha/nn/gpt.h"

namespace alpha::nn {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (argmax); else logits are divided by it
  int64_t top_k = 0;         // 0 = the whole vocabulary; else only the k largest logits
  uint64_t seed = 0;
  // Only ids below this are drawn (0 = the model's whole vocabulary): a model's vocabulary may be padded
  // past its tokenizer's, and ids the tokenizer lacks must never be sampled.
  int64_t vocab_limit = 0;
};

// Appends max_new_tokens tokens to `prompt` (non-empty, ids in [0, vocab_size)), each from the model's
// logits at the last position with the context cropped to its last block_size tokens. Runs without
// recording gradients. Returns only the new tokens.
std::vector<int32_t> generate(const GPT& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SamplingOptions& options);

// One draw from a row of logits given a uniform number in [0, 1): temperature and top-k as above;
// ties in top-k are broken toward the lower token id.
int32_t sample_from_logits(std::span<const double> logits, double temperature, int64_t top_k, double uniform);

}  // namespace alpha::nn
