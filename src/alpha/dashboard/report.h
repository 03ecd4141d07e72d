// `alpha report`: one self-contained HTML file for sharing a run. It holds the dashboard's charts (its
// script and styles inlined, the metrics embedded as JSON), the run's config, its final numbers and the
// sample the trainer drew at the end, and references nothing outside itself.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace alpha::dashboard {

struct Report {
  std::string html;
  int64_t skipped_lines = 0;          // metrics lines left out (see metrics_log.h)
  std::vector<std::string> warnings;  // why, for the first few
};

// Builds the report of RUN_DIR; IOError when RUN_DIR holds neither metrics.jsonl nor config.json.
Report build_report(const std::filesystem::path& run_dir);

}  // namespace alpha::dashboard
