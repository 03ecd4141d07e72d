// Checkpoints of a training run (docs/CHECKPOINTS.md describes the layout for readers outside Alpha):
//
//   RUN_DIR/checkpoints/step_00000100/model.safetensors      weights by parameter name
//                                    /optimizer.safetensors  optimizer state, "<slot>/<param>" (AdamW: m/, v/)
//                                    /state.json             step, RNG, data position, configs, ...
//   RUN_DIR/checkpoints/latest                               "step_00000100\n": the newest complete one
//
// A checkpoint is written into a temporary directory, fsynced file by file, renamed into place, and only
// then named by `latest` (replaced atomically): the whole checkpoint is atomic as a unit. A crash at any
// point leaves `latest` naming a complete checkpoint, and the leftovers (hidden names starting with a
// dot) are removed by the next save or resume. One process saves into a run directory at a time.
// tests/train/test_fault_injection.cpp kills a real training process before every file-system step of a
// save (ALPHA_FAULT_KILL_AT, alpha/core/fault.h) and checks that the run resumes bit for bit.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
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
// name not of the form "<slot>/<weight name>". IOError: any file-system failure (a full disk, a file-size
// limit, ...): the message names the file and ends with "checkpoint step N was not saved, 'latest' still
// names step_M" (or "the run has no checkpoint yet"); nothing half-written is left visible.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step, const CheckpointData& data,
                                      int keep_last);

// Loads a checkpoint from its step directory, or from a run directory (the one `latest` names).
// IOError names the file and byte offset of any truncation or corruption.
CheckpointData load_checkpoint(const std::filesystem::path& path);

// Parses and checks the text of a state.json (`origin` names it in errors): a JSON object with this
// build's "format_version" and a "step" in [0, 2^63). IOError otherwise. load_checkpoint reads through it.
nlohmann::json parse_checkpoint_state(std::string_view text, const std::string& origin);

// The checkpoint `latest` names; nullopt when the run has none yet. IOError when `latest` is malformed
// or names a directory that does not exist.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// Removes what crashed saves and prunings left in RUN_DIR/checkpoints (".tmp.step_*", ".deleting.step_*",
// ".latest.tmp.*"; nothing else) and returns their paths. save_checkpoint calls it first; the trainer calls
// it when resuming. IOError when one cannot be removed.
std::vector<std::filesystem::path> remove_checkpoint_leftovers(const std::filesystem::path& run_dir);

// Every step directory of the run, by increasing step (each one was complete when renamed into place).
std::vector<std::pair<int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& run_dir);

}  // namespace alpha::train
