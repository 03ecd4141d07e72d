#include "alpha/core/device.h"

#include <charconv>

#include "alpha/core/error.h"

namespace alpha {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(std::string_view text, std::string_view what) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    int ordinal = -1;
    auto digits = text.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (ec == std::errc() && end == digits.data() + digits.size() && ordinal >= 0) return cuda(ordinal);
  }
  raise<ConfigError>("Device::parse", what, "'cpu', 'cuda' or 'cuda:N'", quoted(text));
}

}  // namespace alpha
