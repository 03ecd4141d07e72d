// The metrics.jsonl reader (alpha/dashboard/metrics_log.h, parse_metrics and last_step_in, which
// read_metrics and last_step read files through) on arbitrary text. The reader is tolerant: it never
// throws; bad lines are counted and skipped. What it keeps must be records with an int64 step past
// after_step that the dashboard can send (dump to JSON).
#include "alpha/dashboard/metrics_log.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace alpha;
  std::string_view text = fuzz::as_text(data, size);
  const int64_t after = int64_t(size % 3);  // a client polling a live run asks for steps past the last it has
  dashboard::MetricsLog log = dashboard::parse_metrics(text, after, "metrics.jsonl");
  fuzz::require(log.skipped_lines >= 0 && log.warnings.size() <= size_t(log.skipped_lines), "counted skips");
  for (const nlohmann::json& r : log.records)
    fuzz::require(r.is_object() && r.at("step").get<int64_t>() > after, "records have a step past after_step");
  // What the server sends for /api/runs/<name>/metrics.
  (void)nlohmann::json{{"records", log.records}, {"skipped_lines", log.skipped_lines}, {"warnings", log.warnings}}.dump();
  std::optional<int64_t> last = dashboard::last_step_in(text);
  if (last && *last > after) fuzz::require(!log.records.empty(), "the last step is among the records");
  return 0;
}
