#include "alpha/core/fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>

#include "alpha/core/error.h"

namespace alpha::fault {

namespace {

thread_local int save_depth = 0;
std::atomic<int64_t> io_steps{0};

[[noreturn]] void bad_variable(const char* name, std::string_view expected, const char* value) {
  raise<ConfigError>("fault injection", name, expected, quoted(value));
}

// A positive decimal integer, all of `text`; nullopt when it is not one.
std::optional<int64_t> parse_positive(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value > 0 ? std::optional<int64_t>(value) : std::nullopt;
}

int64_t kill_at() {
  static const int64_t value = [] {
    const char* text = std::getenv("ALPHA_FAULT_KILL_AT");
    if (text == nullptr || *text == '\0') return int64_t(0);
    std::optional<int64_t> n = parse_positive(text);
    if (!n) bad_variable("ALPHA_FAULT_KILL_AT", "a positive integer", text);
    return *n;
  }();
  return value;
}

// "3,7-9" -> {3, 7, 8, 9}. Ranges are capped so that a typo cannot allocate without bound.
std::set<int64_t> parse_steps(const char* name) {
  std::set<int64_t> steps;
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return steps;
  constexpr std::string_view kExpected = "step numbers >= 1 separated by commas, or ranges A-B (e.g. 3,7-9)";
  std::string_view rest(text);
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    size_t dash = item.find('-');
    std::optional<int64_t> lo = parse_positive(item.substr(0, dash));
    std::optional<int64_t> hi = dash == std::string_view::npos ? lo : parse_positive(item.substr(dash + 1));
    if (!lo || !hi || *hi < *lo || *hi - *lo > 1000000) bad_variable(name, kExpected, text);
    for (int64_t s = *lo; s <= *hi; ++s) steps.insert(s);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return steps;
}

}  // namespace

CheckpointSaveScope::CheckpointSaveScope() { ++save_depth; }
CheckpointSaveScope::~CheckpointSaveScope() { --save_depth; }

void before_io(std::string_view what, const std::filesystem::path& path) {
  if (save_depth == 0) return;
  const int64_t target = kill_at();
  if (target == 0) return;
  const int64_t n = ++io_steps;
  if (n != target) return;
  std::fprintf(stderr, "alpha: fault injection: SIGKILL before checkpoint I/O step %lld: %.*s '%s'\n",
               static_cast<long long>(n), int(what.size()), what.data(), path.c_str());
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  ::pause();  // SIGKILL cannot be caught: the process ends here
  std::abort();
}

std::optional<double> gradient_poison(int64_t step) {
  static const std::set<int64_t> nan_steps = parse_steps("ALPHA_FAULT_NAN_STEPS");
  static const std::set<int64_t> inf_steps = parse_steps("ALPHA_FAULT_INF_STEPS");
  if (nan_steps.contains(step)) return std::numeric_limits<double>::quiet_NaN();
  if (inf_steps.contains(step)) return std::numeric_limits<double>::infinity();
  return std::nullopt;
}

}  // namespace alpha::fault
