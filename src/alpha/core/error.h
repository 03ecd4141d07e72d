// Typed errors. Every message names the operation, the argument, what was expected and what came,
// in the form "[op] argument 'arg': expected X, got Y", so a user can fix the call without reading code.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace alpha {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error { using Error::Error; };
class DTypeError : public Error { using Error::Error; };
class DeviceError : public Error { using Error::Error; };
class LayoutError : public Error { using Error::Error; };   // contiguity and stride requirements
class ValueError : public Error { using Error::Error; };    // out-of-range values (token ids, probabilities)
class ConfigError : public Error { using Error::Error; };   // bad configuration or command-line values
class IOError : public Error { using Error::Error; };       // files: names the file, and the byte offset where known
class BackendError : public Error { using Error::Error; };  // a backend call failed (CUDA, BLAS)
class NumericError : public Error { using Error::Error; };  // a computation diverged (repeated non-finite gradients)

// 'text' in single quotes, for messages that show what the user typed. (Built with append: GCC 12's
// -Wrestrict misfires on "'" + std::string(...) + "'".)
std::string quoted(std::string_view text);

std::string format_arg_error(std::string_view op, std::string_view arg, std::string_view expected,
                             std::string_view got);

// Throws E with the standard message. Used by every validation in the tensor-op layer.
template <class E>
[[noreturn]] void raise(std::string_view op, std::string_view arg, std::string_view expected,
                        std::string_view got) {
  throw E(format_arg_error(op, arg, expected, got));
}

// For files: "[op] file 'path' at byte offset N: what".
[[noreturn]] void raise_io(std::string_view op, std::string_view path, long long offset, std::string_view what);

}  // namespace alpha
