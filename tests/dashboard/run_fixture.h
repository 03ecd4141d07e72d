// Run directories written by hand for the dashboard's tests: metrics.jsonl lines shaped like the
// trainer's, a config.json and a sample, without the cost of training.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace alpha::test {

// One metrics line as the trainer writes it (newline included); loss = 5 - step / 10.
std::string metrics_line(int64_t step);

// RUN_DIR with config.json (train.steps = total_steps), `steps_logged` metrics lines and sample.txt.
void write_fixture_run(const std::filesystem::path& run_dir, int64_t steps_logged, int64_t total_steps);

}  // namespace alpha::test
