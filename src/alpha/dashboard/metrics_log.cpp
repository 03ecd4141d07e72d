#include "alpha/dashboard/metrics_log.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "alpha/core/json.h"

namespace alpha::dashboard {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxWarnings = 20;      // a log of garbage must not make a response of warnings
constexpr std::streamoff kTailBytes = 64 * 1024;  // more than a few metrics lines

// The record on a line, or why it is not one.
std::optional<nlohmann::json> parse_record(const std::string& line, std::string& why) {
  nlohmann::json record = parse_json(line, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) {
    why = "not JSON";
  } else if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer() ||
             (record["step"].is_number_unsigned() &&
              record["step"].get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))) {
    why = "not a record with an integer step";
  } else {
    return record;
  }
  return std::nullopt;
}

}  // namespace

MetricsLog read_metrics(const fs::path& file, int64_t after_step) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return {};
  std::stringstream contents;
  contents << in.rdbuf();
  return parse_metrics(contents.str(), after_step, file.filename().string());
}

MetricsLog parse_metrics(std::string_view text, int64_t after_step, const std::string& file_name) {
  MetricsLog log;
  size_t begin = 0;
  for (int64_t line_number = 1; begin < text.size(); ++line_number) {
    size_t end = text.find('\n', begin);
    bool complete = end != std::string::npos;
    std::string line(text.substr(begin, complete ? end - begin : std::string::npos));
    begin = complete ? end + 1 : text.size();
    if (line.empty()) continue;
    std::string why;
    // A whole object is kept even before its newline lands; anything else is skipped.
    if (std::optional<nlohmann::json> record = parse_record(line, why)) {
      if ((*record)["step"].get<int64_t>() > after_step) log.records.push_back(std::move(*record));
      continue;
    }
    // The trainer writes each record with its newline: a last line without one is still being written.
    if (!complete) why = "incomplete (being written?)";
    ++log.skipped_lines;
    if (log.warnings.size() < kMaxWarnings)
      log.warnings.push_back(file_name + " line " + std::to_string(line_number) + ": " + why +
                             ", skipped");
  }
  return log;
}

std::optional<int64_t> last_step(const fs::path& file) {
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  std::streamoff size = in.tellg();
  if (size < 0) return std::nullopt;  // not seekable: not a log file
  std::streamoff start = size > kTailBytes ? size - kTailBytes : 0;
  in.seekg(start);
  std::string tail(size_t(size - start), '\0');
  in.read(tail.data(), std::streamsize(tail.size()));
  tail.resize(size_t(in.gcount()));  // the file may have shrunk since tellg
  return last_step_in(tail);
}

std::optional<int64_t> last_step_in(std::string_view tail) {
  std::istringstream lines{std::string(tail)};
  std::string line, why;
  std::optional<int64_t> step;
  // The first line of a cut tail is partial and fails to parse, which is what the reader does anyway.
  while (std::getline(lines, line))
    if (auto record = parse_record(line, why)) step = (*record)["step"].get<int64_t>();
  return step;
}

}  // namespace alpha::dashboard
