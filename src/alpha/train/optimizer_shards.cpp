#include "alpha/train/optimizer_shards.h"

#include <cstdio>
#include <set>

#include "alpha/core/error.h"
#include "alpha/train/checkpoint.h"
#include "alpha/train/safetensors.h"

namespace alpha::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOp = "optimizer shard";

fs::path shards_root(const fs::path& run_dir) { return run_dir / "optimizer_shards"; }

}  // namespace

fs::path optimizer_shard_path(const fs::path& run_dir, int64_t step, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.safetensors", rank);
  return shards_root(run_dir) / checkpoint_dir(run_dir, step).filename() / name;
}

void write_optimizer_shard(const fs::path& run_dir, int64_t step, int rank, int world_size,
                           const OptimizerShard& shard) {
  fs::path path = optimizer_shard_path(run_dir, step, rank);
  fs::create_directories(path.parent_path());
  write_safetensors(path, shard.tensors,
                    {{"rank", std::to_string(rank)},
                     {"world_size", std::to_string(world_size)},
                     {"optimizer_step", std::to_string(shard.optimizer_step)}});
}

OptimizerShard read_optimizer_shard(const fs::path& run_dir, int64_t step, int rank, int world_size) {
  fs::path path = optimizer_shard_path(run_dir, step, rank);
  if (!fs::exists(path))
    raise_io(kOp, path.string(), 0,
             "missing: the checkpoint of step " + std::to_string(step) + " has no optimizer shard for rank " +
                 std::to_string(rank));
  SafetensorsContents contents = read_safetensors(path);
  auto field = [&](const char* key) {
    auto it = contents.metadata.find(key);
    if (it == contents.metadata.end()) raise_io(kOp, path.string(), 0, std::string("no '") + key + "' in the metadata");
    return it->second;
  };
  if (field("rank") != std::to_string(rank) || field("world_size") != std::to_string(world_size))
    raise_io(kOp, path.string(), 0,
             "written by rank " + field("rank") + " of " + field("world_size") + ", expected rank " +
                 std::to_string(rank) + " of " + std::to_string(world_size));
  return {std::move(contents.tensors), std::stoll(field("optimizer_step"))};
}

void prune_optimizer_shards(const fs::path& run_dir) {
  if (!fs::is_directory(shards_root(run_dir))) return;
  std::set<std::string> kept;
  for (const auto& [step, dir] : list_checkpoints(run_dir)) kept.insert(dir.filename().string());
  for (const auto& entry : fs::directory_iterator(shards_root(run_dir)))
    if (!kept.contains(entry.path().filename().string())) fs::remove_all(entry.path());
}

}  // namespace alpha::train
