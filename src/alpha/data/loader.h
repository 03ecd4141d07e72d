// Streams training batches from token shards. The shards are cut into windows of T+1 tokens that
// start every T tokens (a window's last token, the final target, is the next window's first input),
// never crossing a shard's end. Each epoch visits the windows in a permutation seeded by
// (seed, epoch); a batch takes B * world_size consecutive windows of it, B per rank, so ranks never
// share a window. An epoch holds whole optimizer steps of micro_steps batches (gradient accumulation):
// the windows past the last whole step are left out, so one rank accumulating two batches of B sees the
// windows two ranks of B see in one step, epoch after epoch. The position (epoch, next batch) is all the
// state: resuming from it reproduces the batches of an uninterrupted run exactly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "alpha/data/shard.h"
#include "alpha/tensor/tensor.h"

namespace alpha::data {

struct LoaderOptions {
  int64_t batch_size = 8;  // B, per rank
  int64_t seq_len = 256;   // T
  int vocab_size = 0;      // every token id must be below it
  uint64_t seed = 0;
  bool shuffle = true;     // false: windows in file order, e.g. for evaluation
  int rank = 0;
  int world_size = 1;
  int64_t micro_steps = 1;  // next() calls per optimizer step
};

// Where a loader stands: the batch that next() returns is batch `index` of epoch `epoch`.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const LoaderPosition&) const = default;
};
// {"epoch": 0, "index": 0}; from_json throws ConfigError on anything else.
void to_json(nlohmann::json& j, const LoaderPosition& position);
void from_json(const nlohmann::json& j, LoaderPosition& position);

struct Batch {
  Tensor inputs;   // i32 (B, T)
  Tensor targets;  // i32 (B, T): the inputs shifted left by one token
};

class Loader {
 public:
  // Opens (memory-maps) and validates every shard; ConfigError if they hold less than one step.
  Loader(const std::vector<std::string>& shard_paths, const LoaderOptions& options);

  Batch next();
  LoaderPosition position() const { return {epoch_, index_}; }
  // Continues from a position saved by position() (ConfigError when it lies outside the data).
  void seek(const LoaderPosition& position);

  int64_t windows() const { return int64_t(shard_first_window_.back()); }  // in all shards
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  void shuffle_for_epoch();
  // The tokens of window w: T + 1 of them.
  const uint16_t* window_tokens(uint64_t w) const;

  LoaderOptions options_;
  std::vector<std::unique_ptr<ShardReader>> shards_;
  std::vector<uint64_t> shard_first_window_;  // prefix sums of windows per shard, one entry more than shards
  std::vector<uint32_t> order_;              // this epoch's permutation of window indices
  int64_t batches_per_epoch_ = 0;
  int64_t epoch_ = 0;
  int64_t index_ = 0;
};

}  // namespace alpha::data
