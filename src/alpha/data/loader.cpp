#include "alpha/data/loader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <numeric>

#include "alpha/core/error.h"
#include "alpha/data/rng.h"
#include "alpha/data/tokenizer.h"

namespace alpha::data {
namespace {

constexpr std::string_view kOp = "Loader";

void check_option(bool ok, std::string_view arg, std::string_view expected, int64_t got) {
  if (!ok) raise<ConfigError>(kOp, arg, expected, std::to_string(got));
}

}  // namespace

void to_json(nlohmann::json& j, const LoaderPosition& position) {
  j = nlohmann::json{{"epoch", position.epoch}, {"index", position.index}};
}

void from_json(const nlohmann::json& j, LoaderPosition& position) {
  if (!j.is_object() || !j.contains("epoch") || !j.contains("index") || !j["epoch"].is_number_integer() ||
      !j["index"].is_number_integer())
    raise<ConfigError>("LoaderPosition", "json", "{\"epoch\": <integer>, \"index\": <integer>}", j.dump());
  position.epoch = j["epoch"].get<int64_t>();
  position.index = j["index"].get<int64_t>();
}

Loader::Loader(const std::vector<std::string>& shard_paths, const LoaderOptions& options) : options_(options) {
  check_option(options.batch_size >= 1, "batch_size", "at least 1", options.batch_size);
  check_option(options.seq_len >= 1, "seq_len", "at least 1", options.seq_len);
  check_option(options.vocab_size >= 1 && options.vocab_size <= kMaxVocabSize, "vocab_size",
               "in [1, 65536]", options.vocab_size);
  check_option(options.world_size >= 1, "world_size", "at least 1", options.world_size);
  check_option(options.rank >= 0 && options.rank < options.world_size, "rank",
               "in [0, world_size=" + std::to_string(options.world_size) + ")", options.rank);
  check_option(options.micro_steps >= 1, "micro_steps", "at least 1", options.micro_steps);
  if (shard_paths.empty()) raise<ConfigError>(kOp, "shard_paths", "at least one shard", "none");

  const uint64_t T = uint64_t(options.seq_len);
  uint64_t total_tokens = 0;
  shard_first_window_ = {0};
  for (const auto& path : shard_paths) {
    shards_.push_back(std::make_unique<ShardReader>(path, options.vocab_size));
    uint64_t n = shards_.back()->size();
    total_tokens += n;
    shard_first_window_.push_back(shard_first_window_.back() + (n == 0 ? 0 : (n - 1) / T));
  }
  if (windows() > int64_t(UINT32_MAX))
    raise<ConfigError>(kOp, "seq_len", "fewer than 2^32 windows in the shards (a longer seq_len)",
                       std::to_string(options.seq_len) + ", giving " + std::to_string(windows()) + " windows");
  const int64_t per_step = options.batch_size * options.world_size * options.micro_steps;
  batches_per_epoch_ = windows() / per_step * options.micro_steps;
  if (batches_per_epoch_ == 0)
    raise<ConfigError>(kOp, "shard_paths",
                       "at least batch_size * world_size * micro_steps = " + std::to_string(per_step) +
                           " windows of seq_len+1 = " +
                           std::to_string(T + 1) + " tokens",
                       std::to_string(windows()) + " windows in " + std::to_string(total_tokens) + " tokens of " +
                           std::to_string(shard_paths.size()) + " shard(s), the first '" + shard_paths[0] + "'");
  order_.resize(size_t(windows()));
  shuffle_for_epoch();
}

void Loader::shuffle_for_epoch() {
  std::iota(order_.begin(), order_.end(), uint32_t(0));
  if (!options_.shuffle) return;
  // One stream per (seed, epoch): the seed's first output keys it, the epoch offsets it.
  SplitMix64 rng(SplitMix64(options_.seed).next() + uint64_t(epoch_) * 0xD1B54A32D192ED03ull);
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.below(i)]);  // Fisher-Yates
}

const uint16_t* Loader::window_tokens(uint64_t w) const {
  size_t shard = size_t(std::upper_bound(shard_first_window_.begin(), shard_first_window_.end(), w) -
                        shard_first_window_.begin()) - 1;
  return shards_[shard]->tokens().data() + (w - shard_first_window_[shard]) * uint64_t(options_.seq_len);
}

void Loader::seek(const LoaderPosition& position) {
  check_option(position.epoch >= 0, "position.epoch", "at least 0", position.epoch);
  check_option(position.index >= 0 && position.index <= batches_per_epoch_, "position.index",
               "in [0, " + std::to_string(batches_per_epoch_) + "], the batches per epoch of these shards",
               position.index);
  if (position.epoch != epoch_) {
    epoch_ = position.epoch;
    shuffle_for_epoch();
  }
  index_ = position.index;
}

Batch Loader::next() {
  if (index_ == batches_per_epoch_) {
    ++epoch_;
    index_ = 0;
    shuffle_for_epoch();
  }
  const int64_t B = options_.batch_size, T = options_.seq_len;
  Batch batch{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  int32_t* inputs = batch.inputs.data<int32_t>();    // (B, T)
  int32_t* targets = batch.targets.data<int32_t>();  // (B, T)
  const size_t first = size_t((index_ * options_.world_size + options_.rank) * B);
  for (int64_t b = 0; b < B; ++b) {
    const uint16_t* tokens = window_tokens(order_[first + size_t(b)]);
    for (int64_t t = 0; t < T; ++t) {
      inputs[b * T + t] = tokens[t];
      targets[b * T + t] = tokens[t + 1];
    }
  }
  ++index_;
  return batch;
}

}  // namespace alpha::data
