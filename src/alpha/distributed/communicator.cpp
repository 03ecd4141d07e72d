#include "alpha/distributed/communicator.h"

namespace alpha::distributed {

void require_collective_dtype(const char* op, DType dtype) {
  if (dtype != DType::f64 && dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    raise<DTypeError>(op, "dtype", "f64, f32, bf16 or f16", std::string(dtype_name(dtype)));
}

}  // namespace alpha::distributed
