// Under ZeRO-1 each rank holds only its shard of the optimizer state, so each rank writes its own file
// beside the checkpoints (rank 0 still writes the weights and state.json of the checkpoint itself):
//
//   RUN_DIR/optimizer_shards/step_00000100/rank_00001.safetensors   m/bucket_<b>, v/bucket_<b>
//
// with metadata {"rank", "world_size", "optimizer_step"}. The ranks write their shards before rank 0
// writes the checkpoint (and moves `latest`), so a checkpoint that `latest` names has all its shards.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "alpha/tensor/tensor.h"

namespace alpha::train {

struct OptimizerShard {
  std::vector<std::pair<std::string, Tensor>> tensors;
  int64_t optimizer_step = 0;
};

std::filesystem::path optimizer_shard_path(const std::filesystem::path& run_dir, int64_t step, int rank);

// Writes this rank's shard (atomically, like every checkpoint file).
void write_optimizer_shard(const std::filesystem::path& run_dir, int64_t step, int rank, int world_size,
                           const OptimizerShard& shard);

// Reads rank `rank`'s shard of step `step`. IOError naming the file when it is missing or was written by
// another rank or world size.
OptimizerShard read_optimizer_shard(const std::filesystem::path& run_dir, int64_t step, int rank, int world_size);

// Removes the shard folders of steps that have no checkpoint any more (pruned by keep_last).
void prune_optimizer_shards(const std::filesystem::path& run_dir);

}  // namespace alpha::train
