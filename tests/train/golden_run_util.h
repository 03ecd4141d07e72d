// The golden regression run's pieces, shared by the CPU run (tests/train/test_golden_run.cpp) and the GPU
// run (tests/cuda/test_cuda_training.cpp).
#pragma once
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "alpha/train/trainer.h"
#include "core/file_test_util.h"

namespace alpha::train {

// The records of RUN_DIR/metrics.jsonl, in order.
std::vector<nlohmann::json> metrics_of(const std::filesystem::path& run_dir);

// The `tiny` config for `steps` steps: batch 8, validation and checkpoints every 50 steps, no sample.
TrainerOptions tiny_options(const std::filesystem::path& run_dir, int64_t steps);

// Every weight and optimiser tensor of two checkpoints, compared bit for bit, and the data loader's position
// unless same_data_position is false (a rank's loader counts its own batches).
void expect_same_checkpoint(const std::filesystem::path& a, const std::filesystem::path& b,
                            bool same_data_position = true);

// Runs `steps` straight in one directory and steps/2 + resume + steps/2 in another, on the same data, and
// expects the same losses, grad norms, weights and optimiser state, bit for bit.
void expect_resume_is_bit_exact(TrainerOptions straight, const test::TempDir& dir);

}  // namespace alpha::train
