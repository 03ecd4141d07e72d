#include "alpha/core/error.h"

namespace alpha {

std::string quoted(std::string_view text) {
  std::string q;
  q.reserve(text.size() + 2);
  q.append("'").append(text).append("'");
  return q;
}

std::string format_arg_error(std::string_view op, std::string_view arg, std::string_view expected,
                             std::string_view got) {
  std::string msg;
  msg.reserve(op.size() + arg.size() + expected.size() + got.size() + 40);
  msg.append("[").append(op).append("] argument '").append(arg).append("': expected ");
  msg.append(expected).append(", got ").append(got);
  return msg;
}

void raise_io(std::string_view op, std::string_view path, long long offset, std::string_view what) {
  std::string msg;
  msg.append("[").append(op).append("] file '").append(path).append("'");
  if (offset >= 0) msg.append(" at byte offset ").append(std::to_string(offset));
  msg.append(": ").append(what);
  throw IOError(msg);
}

}  // namespace alpha
