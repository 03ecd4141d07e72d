// JSON from files Alpha did not write itself (configs, checkpoint state, safetensors headers, metrics logs).
// Two traps of nlohmann::json::parse on hostile text, closed here:
//  - Not every failure is a parse_error: a number past the double range ("1e400") raises out_of_range.
//  - Its parser is iterative, but copying, comparing and dumping a value recurse once per level of nesting,
//    so a file of a million '[' that parses fine overflows the stack later, in an error message or a
//    dashboard response. No file format of Alpha's nests more than a few levels: parse_json caps it.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "alpha/core/error.h"

namespace alpha {

inline constexpr int kMaxJsonDepth = 64;

// Text that is not JSON, or nests arrays and objects deeper than kMaxJsonDepth. offset(): the byte (from
// 0, in the text parsed) where it went wrong, or -1 where nlohmann does not say.
class JsonParseError : public ValueError {
 public:
  JsonParseError(const std::string& what, long long offset) : ValueError(what), offset_(offset) {}
  long long offset() const { return offset_; }

 private:
  long long offset_;
};

namespace detail {
struct JsonTooDeep {};
}  // namespace detail

// Json::parse(text, callback, allow_exceptions, ignore_comments) with the nesting cap, and one error type:
// any failure raises JsonParseError, or gives a discarded value when allow_exceptions is false. `callback`,
// when given, sees every event as with Json::parse.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, typename Json::parser_callback_t callback = nullptr,
                bool allow_exceptions = true, bool ignore_comments = false) {
  auto limited = [&callback](int depth, typename Json::parse_event_t event, Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw detail::JsonTooDeep{};
    return callback ? callback(depth, event, parsed) : true;
  };
  try {
    return Json::parse(text, limited, /*allow_exceptions=*/true, ignore_comments);
  } catch (const detail::JsonTooDeep&) {
    if (allow_exceptions)
      throw JsonParseError("JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                               " levels of arrays and objects (no Alpha file nests that deep)",
                           -1);
  } catch (const typename Json::parse_error& e) {
    if (allow_exceptions) throw JsonParseError(e.what(), e.byte > 0 ? (long long)e.byte - 1 : 0);
  } catch (const typename Json::exception& e) {  // out_of_range 406: a number past the double range
    if (allow_exceptions) throw JsonParseError(e.what(), -1);
  }
  return Json(Json::value_t::discarded);
}

}  // namespace alpha
