// Range validation for i32 index tensors (embedding ids, cross-entropy targets), shared by the ops that
// take them: the first offending entry is reported with its flat position and value, so a user can
// find the bad token in their data.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "alpha/core/error.h"
#include "alpha/tensor/tensor.h"

namespace alpha::ops {

// indices: a contiguous i32 tensor on any device. Every entry must lie in [0, limit) or equal `ignore` when
// given; `entry` names what a flat index is ("position", "row") in the message. Returns the number of
// entries that are not `ignore` (all of them without one).
// Cost on a GPU: the entries are copied to the host first, one device-to-host copy that waits for the
// work queued on the device's stream (4 bytes per entry; the wait is the expensive part).
inline int64_t check_index_range(std::string_view op, std::string_view arg, const Tensor& indices, int64_t limit,
                                 std::string_view entry, std::optional<int32_t> ignore = std::nullopt) {
  const Tensor host = indices.to(Device::cpu());
  const int32_t* p = host.data<int32_t>();
  int64_t counted = 0;
  for (int64_t i = 0, n = host.numel(); i < n; ++i) {
    if (ignore && p[i] == *ignore) continue;
    if (p[i] >= 0 && p[i] < limit) {
      ++counted;
      continue;
    }
    std::string expected = "values in [0, " + std::to_string(limit) + ")";
    if (ignore) expected += " or " + std::to_string(*ignore) + " (ignored)";
    raise<ValueError>(op, arg, expected, std::to_string(p[i]) + " at " + std::string(entry) + " " + std::to_string(i));
  }
  return counted;
}

}  // namespace alpha::ops
