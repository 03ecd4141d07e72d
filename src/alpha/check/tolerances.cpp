#include "alpha/check/tolerances.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "alpha/core/error.h"

namespace alpha::check {

Tolerance tolerance(std::string_view check, DType dtype) {
  for (const auto& row : kTolerances)
    if (row.check == check && row.dtype == dtype) return row.tol;
  throw std::out_of_range("no tolerance row for check '" + std::string(check) + "' and dtype " +
                          std::string(dtype_name(dtype)) + " in src/alpha/check/tolerances.h");
}

Tolerance layernorm_param_grad_tolerance(DType dtype, int64_t rows) {
  Tolerance tol = tolerance("cuda.layernorm", dtype);
  tol.abs = std::max(tol.abs, 1e-7 * double(rows));
  return tol;
}

double naive_attention_bound(std::string_view check, DType dtype, double naive_max_abs, double want_max_abs) {
  if (dtype != DType::bf16 && dtype != DType::f16)
    raise<DTypeError>("naive_attention_bound", "dtype", "bf16 or f16 (the rule judges low-precision outputs)",
                      dtype_name(dtype));
  const double unit_roundoff = dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
  const double floor = 0.5 * unit_roundoff * want_max_abs + tolerance(check, DType::f32).abs;
  return kNaiveErrorFactor * naive_max_abs + floor;
}

}  // namespace alpha::check
