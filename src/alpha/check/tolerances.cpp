#include "alpha/check/tolerances.h"

#include <stdexcept>
#include <string>

namespace alpha::check {

Tolerance tolerance(std::string_view check, DType dtype) {
  for (const auto& row : kTolerances)
    if (row.check == check && row.dtype == dtype) return row.tol;
  throw std::out_of_range("no tolerance row for check '" + std::string(check) + "' and dtype " +
                          std::string(dtype_name(dtype)) + " in src/alpha/check/tolerances.h");
}

}  // namespace alpha::check
