#include "alpha/dashboard/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "alpha/core/error.h"
#include "alpha/core/file_io.h"
#include "alpha/core/json.h"
#include "alpha/dashboard/assets.h"
#include "alpha/dashboard/metrics_log.h"

namespace alpha::dashboard {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kOp = "report";

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// JSON inside <script>: "</" written as "<\/" (the same string to JSON) so no value can close the tag.
std::string script_safe_json(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

double number_or(const json& record, const char* key, double fallback) {
  auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : fallback;
}

// The table of final numbers: the last step's loss, the last validation loss, throughput and memory.
std::string final_numbers(const std::vector<json>& records, const json& config) {
  std::vector<std::pair<std::string, std::string>> rows;
  if (records.empty()) {
    rows.emplace_back("steps", "none logged yet");
  } else {
    const json& last = records.back();
    std::string steps = std::to_string(last["step"].get<int64_t>());
    if (config.contains("train") && config["train"].contains("steps"))
      steps += " of " + config["train"]["steps"].dump();
    rows.emplace_back("steps", steps);
    rows.emplace_back("final loss", format("%.4f", number_or(last, "loss", NAN)));
    auto validated = std::find_if(records.rbegin(), records.rend(),
                                  [](const json& r) { return r.contains("val_loss") && r["val_loss"].is_number(); });
    rows.emplace_back("final validation loss",
                      validated == records.rend() ? "none" : format("%.4f", (*validated)["val_loss"].get<double>()));
    double tokens = 0, step_seconds = 0, peak_bytes = 0;
    int64_t clipped = 0;
    for (const json& r : records) {
      double seconds = number_or(r, "step_time_s", 0);
      tokens += number_or(r, "tokens_per_second", 0) * seconds;
      step_seconds += seconds;
      peak_bytes = std::max(peak_bytes, number_or(r, "peak_bytes", 0));
      clipped += number_or(r, "clip_coef", 1) < 1;
    }
    rows.emplace_back("tokens", format("%.0f", tokens));
    rows.emplace_back("time in steps", format("%.1f s", step_seconds));
    rows.emplace_back("tokens per second", format("%.0f", step_seconds > 0 ? tokens / step_seconds : 0));
    rows.emplace_back("clipped steps", format("%.1f %%", 100.0 * double(clipped) / double(records.size())));
    rows.emplace_back("peak memory", format("%.1f MiB", peak_bytes / (1 << 20)));
  }
  std::string html;
  for (const auto& [name, value] : rows) html += "<tr><th>" + name + "</th><td>" + html_escape(value) + "</td></tr>";
  return html;
}

std::string asset_body(std::string_view name) {
  const Asset* asset = find_asset(name);
  if (!asset) raise<IOError>(kOp, "asset", "a file embedded from src/alpha/dashboard/assets", std::string(name));
  return std::string(asset->body);
}

// Replaces each {{key}} of `page` in one pass, so replaced text is never scanned again.
std::string fill_template(std::string_view page, const std::map<std::string, std::string>& values) {
  std::string out;
  size_t at = 0;
  while (true) {
    size_t open = page.find("{{", at);
    if (open == page.npos) break;
    size_t close = page.find("}}", open);
    if (close == page.npos) break;
    out.append(page.substr(at, open - at));
    std::string key(page.substr(open + 2, close - open - 2));
    auto value = values.find(key);
    if (value == values.end()) raise<IOError>(kOp, "report.html", "known placeholders", "{{" + key + "}}");
    out += value->second;
    at = close + 2;
  }
  out.append(page.substr(at));
  return out;
}

}  // namespace

Report build_report(const fs::path& run_dir) {
  fs::path metrics = run_dir / "metrics.jsonl", config_file = run_dir / "config.json";
  if (!fs::exists(metrics) && !fs::exists(config_file))
    raise<IOError>(kOp, "RUN_DIR", "a run directory (with metrics.jsonl or config.json)",
                   alpha::quoted(run_dir.string()));
  Report report;
  MetricsLog log = read_metrics(metrics);
  report.skipped_lines = log.skipped_lines;
  report.warnings = log.warnings;

  json config = json::object();
  if (fs::exists(config_file)) {
    config = parse_json(read_file(config_file, kOp), nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) raise_io(kOp, config_file.string(), -1, "not valid JSON");
  }
  std::string sample = fs::exists(run_dir / "sample.txt")
                           ? read_file(run_dir / "sample.txt", kOp)
                           : "(none: the run has not finished, or it was trained with --sample-tokens 0)";
  fs::path resolved = fs::weakly_canonical(run_dir);
  std::string name = (resolved.has_filename() ? resolved : resolved.parent_path()).filename().string();
  json data = {{"runs", json::array({{{"name", name}, {"records", log.records}}})}};

  report.html = fill_template(asset_body("report.html"),
                              {{"name", html_escape(name)},
                               {"style", asset_body("style.css")},
                               {"numbers", final_numbers(log.records, config)},
                               {"config", html_escape(config.dump(2))},
                               {"sample", html_escape(sample)},
                               {"data", script_safe_json(data)},
                               {"charts_js", asset_body("charts.js")},
                               {"report_js", asset_body("report.js")}});
  return report;
}

}  // namespace alpha::dashboard
