#include "alpha/core/dtype.h"

#include "alpha/core/error.h"

namespace alpha {

namespace {
constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                DType::i32, DType::i64, DType::u16,  DType::u8};
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u16: return "u16";
    case DType::u8: return "u8";
  }
  return "?";
}

DType parse_dtype(std::string_view name, std::string_view what) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  raise<ConfigError>("parse_dtype", what, "one of f32, f64, bf16, f16, i32, i64, u16, u8",
                     quoted(name));
}

}  // namespace alpha
