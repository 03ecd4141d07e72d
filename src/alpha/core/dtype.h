// Element types a tensor can hold, and the mapping between C++ types and DType tags.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "alpha/core/half.h"

namespace alpha {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, u16, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: case DType::u16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}
std::string_view dtype_name(DType t);
// Parses "f32", "bf16", ...; throws ConfigError naming `what` on an unknown name.
DType parse_dtype(std::string_view name, std::string_view what);

template <class T> struct dtype_of_t;
template <> struct dtype_of_t<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of_t<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of_t<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of_t<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of_t<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of_t<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of_t<uint16_t> { static constexpr DType value = DType::u16; };
template <> struct dtype_of_t<uint8_t> { static constexpr DType value = DType::u8; };
template <class T> inline constexpr DType dtype_of = dtype_of_t<T>::value;

// Accumulation type: f64 stays f64 (the reference precision), everything else accumulates in f32.
template <class T> struct acc_of_t { using type = float; };
template <> struct acc_of_t<double> { using type = double; };
template <class T> using acc_t = typename acc_of_t<T>::type;
// The same rule for a dtype tag: the dtype of acc_t of its element type (f64 for f64, f32 for the others).
constexpr DType accumulation_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

}  // namespace alpha
