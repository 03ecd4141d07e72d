// The host side of tma.cuh: tensor maps of attention operands, encoded by the driver.
#include <cudaTypedefs.h>

#include <string>

#include "alpha/core/error.h"
#include "alpha/kernels/cuda/tma.cuh"
#include "alpha/runtime/cuda_check.cuh"

namespace alpha::kernels::cuda::tma {

namespace {

// The driver's tensor-map encoder, looked up once through the runtime (so the library does not link
// libcuda itself: machines without a GPU driver still load it).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    ALPHA_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || function == nullptr)
      raise<BackendError>("tensor map", "cuTensorMapEncodeTiled", "the driver's tensor-map encoder",
                          "not found");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

}  // namespace

CUtensorMap head_tensor_map(const void* x, bool bf16, size_t element_bytes, const AttentionStrides& strides,
                            int64_t batch, int64_t time, int64_t heads, int64_t features, int box_rows, const char* op,
                            const char* name) {
  const cuuint64_t dims[4] = {cuuint64_t(features), cuuint64_t(heads), cuuint64_t(time), cuuint64_t(batch)};
  const cuuint64_t byte_strides[3] = {cuuint64_t(strides.head) * element_bytes, cuuint64_t(strides.time) * element_bytes,
                                      cuuint64_t(strides.batch) * element_bytes};
  const cuuint32_t box[4] = {64, 1, cuuint32_t(box_rows), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult result = tensor_map_encoder()(
      &map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<void*>(x), dims, byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    raise<LayoutError>(op, name,
                       "a layout the copy engine can describe (16-byte aligned, strides multiples of 16 bytes "
                       "below 2^40)",
                       "strides " + std::to_string(strides.batch) + ", " + std::to_string(strides.time) + ", " +
                           std::to_string(strides.head) + " (cuTensorMapEncodeTiled error " +
                           std::to_string(int(result)) + ")");
  return map;
}

}  // namespace alpha::kernels::cuda::tma
