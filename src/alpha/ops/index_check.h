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

// indices: a contiguous i32 CPU tensor. Every entry must lie in [0, limit) or equal `ignore` when given;
// `entry` names what a flat index is ("position", "row") in the message.
inline void check_index_range(std::string_view op, std::string_view arg, const Tensor& indices, int64_t limit,
                              std::string_view entry, std::optional<int32_t> ignore = std::nullopt) {
  const int32_t* p = indices.data<int32_t>();
  for (int64_t i = 0, n = indices.numel(); i < n; ++i) {
    if ((p[i] >= 0 && p[i] < limit) || (ignore && p[i] == *ignore)) continue;
    std::string expected = "values in [0, " + std::to_string(limit) + ")";
    if (ignore) expected += " or " + std::to_string(*ignore) + " (ignored)";
    raise<ValueError>(op, arg, expected, std::to_string(p[i]) + " at " + std::string(entry) + " " + std::to_string(i));
  }
}

}  // namespace alpha::ops
