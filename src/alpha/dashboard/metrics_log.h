// Reading a run's metrics.jsonl while the trainer may still be writing it. The reader is tolerant: a
// line that is not a JSON object with an integer "step" (garbage, or the last line caught half-written)
// is skipped and counted with a warning naming its line, never an exception; a missing file is an empty
// log. The dashboard's server, the report and the run listing all read through here.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace alpha::dashboard {

struct MetricsLog {
  std::vector<nlohmann::json> records;  // the good lines with step > after_step, in file order
  int64_t skipped_lines = 0;            // lines that were not a record (all of them, not only after_step)
  std::vector<std::string> warnings;    // "metrics.jsonl line N: why", for the first few skipped lines
};

// Reads RUN_DIR/metrics.jsonl (or any such file). `after_step` keeps only records past it, so a client
// polling a live run fetches only what is new.
MetricsLog read_metrics(const std::filesystem::path& file, int64_t after_step = 0);

// The reader over a log's text (`file_name` names it in the warnings).
MetricsLog parse_metrics(std::string_view text, int64_t after_step, const std::string& file_name);

// The step of the file's last good record, reading only its tail (cheap for listing many runs); nullopt
// when the file is missing or holds no good record in its tail.
std::optional<int64_t> last_step(const std::filesystem::path& file);
// The step of the last good record in a tail of a log (its first line may be cut: it is skipped).
std::optional<int64_t> last_step_in(std::string_view tail);

}  // namespace alpha::dashboard
