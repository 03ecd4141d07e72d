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

// Encodes a tiled, 128-byte swizzled map; LayoutError naming `op` and `name` (with `strides`, in words) when the
// driver refuses it.
template <int kRank>
CUtensorMap encode(CUtensorMapDataType type, void* x, const cuuint64_t (&dims)[kRank],
                   const cuuint64_t (&byte_strides)[kRank - 1], const cuuint32_t (&box)[kRank], const char* op,
                   const char* name, const std::string& strides) {
  cuuint32_t element_strides[kRank];
  for (cuuint32_t& e : element_strides) e = 1;
  CUtensorMap map;
  const CUresult result = tensor_map_encoder()(&map, type, kRank, x, dims, byte_strides, box, element_strides,
                                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    raise<LayoutError>(op, name,
                       "a layout the copy engine can describe (16-byte aligned, strides multiples of 16 bytes "
                       "below 2^40)",
                       strides + " (cuTensorMapEncodeTiled error " + std::to_string(int(result)) + ")");
  return map;
}

}  // namespace

CUtensorMap head_tensor_map(const void* x, bool bf16, size_t element_bytes, const AttentionStrides& strides,
                            int64_t batch, int64_t time, int64_t heads, int64_t features, int box_rows, const char* op,
                            const char* name) {
  const cuuint64_t dims[4] = {cuuint64_t(features), cuuint64_t(heads), cuuint64_t(time), cuuint64_t(batch)};
  const cuuint64_t byte_strides[3] = {cuuint64_t(strides.head) * element_bytes, cuuint64_t(strides.time) * element_bytes,
                                      cuuint64_t(strides.batch) * element_bytes};
  const cuuint32_t box[4] = {64, 1, cuuint32_t(box_rows), 1};
  return encode<4>(bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, const_cast<void*>(x),
                   dims, byte_strides, box, op, name,
                   "strides " + std::to_string(strides.batch) + ", " + std::to_string(strides.time) + ", " +
                       std::to_string(strides.head));
}

CUtensorMap accumulator_tensor_map(float* x, int64_t heads, int64_t time, int64_t features, int box_rows,
                                   const char* op, const char* name) {
  const cuuint64_t dims[3] = {cuuint64_t(features), cuuint64_t(time), cuuint64_t(heads)};
  const cuuint64_t byte_strides[2] = {cuuint64_t(features) * 4, cuuint64_t(time * features) * 4};
  const cuuint32_t box[3] = {32, cuuint32_t(box_rows), 1};
  return encode<3>(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, x, dims, byte_strides, box, op, name,
                   "rows of " + std::to_string(features) + " f32");
}

}  // namespace alpha::kernels::cuda::tma
