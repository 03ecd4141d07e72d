// Checkpoints of a training run (docs/CHECKPOINTS.md describes the layout for readers outside Alpha):
//
//   RUN_DIR/checkpoints/step_00000100/model.safetensors      weights by parameter name
//                                    /optimizer.safetensors  optimizer state, "<slot>/<param>" (AdamW: m/, v/)
//                                    /state.json             step, RNG, data position, configs, ...
//   RUN_DIR/checkpoints/latest                               "step_00000100\n": the newest complete one
//
// A checkpoint is written into a temporary directory, fsynced file by file, renamed into place, and only
// then named by `latest` (replaced atomically). A crash at any point leaves `latest` naming a complete
// checkpoint. One process saves into a run directory at a time.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "alpha/tensor/tensor.h"

namespace alpha::train {

struct CheckpointData {
  std::vector<std::pair<std::string, Tensor>> weights;    // model parameters by name (docs/CHECKPOINTS.md)
  std::vector<std::pair<std::string, Tensor>> optimizer;  // "<slot>/<weight name>", e.g. "m/wte.weight"
  // A JSON object: the trainer's fields (rng, data, model_config, ...). save_checkpoint adds "step" and
  // "format_version"; load_checkpoint returns them.
  nlohmann::json state;
};

inline constexpr int kCheckpointFormatVersion = 1;

// RUN_DIR/checkpoints and RUN_DIR/checkpoints/step_<8 digits>.
std::filesystem::path checkpoints_dir(const std::filesystem::path& run_dir);
std::filesystem::path checkpoint_dir(const std::filesystem::path& run_dir, int64_t step);

// Writes the checkpoint for `step`, points `latest` at it, then deletes the oldest checkpoints so that
// keep_last remain among those with steps <= `step` (0 keeps all; checkpoints with larger steps, left
// behind by a run that resumed from an earlier one, are never pruned). A checkpoint directory for the
// same step is replaced atomically. Returns the checkpoint's directory.
// ValueError: negative step or keep_last, state not an object or with a different "step", an optimizer
// name not of the form "<slot>/<weight name>". IOError: any file-system failure (nothing half-written
// is left visible; `latest` still names the previous checkpoint).
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const CheckpointData& data,
                                      int keep_last);

// Loads a checkpoint from its step directory, or from a run directory (the one `latest` names).
// IOError names the file and byte offset of any truncation or corruption.
CheckpointData load_checkpoint(const std::filesystem::path& path);

// The checkpoint `latest` names; nullopt when the run has none yet. IOError when `latest` is malformed
// or names a directory that does not exist.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// Every step directory of the run, by increasing step (each one was complete when renamed into place).
std::vector<std::pair<int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& run_dir);

}  // namespace alpha::train
