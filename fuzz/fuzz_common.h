// Shared by the libFuzzer targets (scripts/fuzz.sh builds and runs them; docs/SECURITY.md says what they
// promise). Each target feeds its input to a real parser of outside data. A typed Alpha error
// (alpha::Error and its subclasses) is the correct answer to bad input and is swallowed; anything else
// (another exception type escaping, an ASan or UBSan report, a hang, a broken invariant) is a crash
// that libFuzzer records.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

#include "alpha/core/error.h"

namespace alpha::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

inline std::span<const std::byte> as_bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// Aborts (a crash to libFuzzer) with a message when a property that must hold does not.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

// Runs `body`; alpha::Error is the expected outcome for bad input, everything else propagates (an
// uncaught exception aborts, which libFuzzer reports with the input that caused it).
template <class Body>
void expect_typed_errors(Body&& body) {
  try {
    body();
  } catch (const alpha::Error&) {
  }
}

}  // namespace alpha::fuzz
