#include "dashboard/run_fixture.h"

#include <nlohmann/json.hpp>

#include "core/file_test_util.h"

namespace alpha::test {

std::string metrics_line(int64_t step) {
  nlohmann::json record = {{"step", step}, {"loss", 5.0 - double(step) / 10}, {"lr", 1e-3}, {"grad_norm", 1.5},
                           {"clip_coef", step % 2 ? 0.5 : 1.0}, {"tokens_per_second", 1000.0},
                           {"step_time_s", 0.1}, {"forward_s", 0.04}, {"backward_s", 0.05}, {"optimizer_s", 0.01},
                           {"ops", 10}, {"allocations", 5}, {"fresh_allocations", 0}, {"peak_bytes", 1 << 20},
                           {"wall_time", 1.7e9 + 0.1 * double(step)}, {"val_loss", nullptr}};
  return record.dump() + "\n";
}

void write_fixture_run(const std::filesystem::path& run_dir, int64_t steps_logged, int64_t total_steps) {
  std::filesystem::create_directories(run_dir);
  nlohmann::json config = {{"model", {{"n_layer", 2}}}, {"train", {{"steps", total_steps}, {"lr", 1e-3}}}};
  write_raw(run_dir / "config.json", config.dump(2));
  std::string lines;
  for (int64_t step = 1; step <= steps_logged; ++step) lines += metrics_line(step);
  write_raw(run_dir / "metrics.jsonl", lines);
  write_raw(run_dir / "sample.txt", "Once upon a fixture");
}

}  // namespace alpha::test
