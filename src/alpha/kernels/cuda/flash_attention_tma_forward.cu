// Flash attention forward for bf16/f16 on Hopper, warp-specialised with TMA and wgmma (the kernel and its
// design: flash_attention_tma_forward.cuh): the operands' tensor maps, the configuration per head-dimension
// bucket, the library's instantiations, and the rule for when the Hopper kernels (this one and
// flash_attention_wgmma_backward.cu) run.
#include <cudaTypedefs.h>

#include <map>
#include <mutex>
#include <string>
#include <type_traits>

#include "alpha/kernels/cuda/flash_attention_tma_forward.cuh"

namespace alpha::kernels::cuda {

bool wgmma_kernels_run(int bucket) {
#if defined(ALPHA_CUDA_SM90A)
  if (bucket != 64 && bucket != 128) return false;
  int device = 0;
  ALPHA_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<int, bool> hopper;  // per device: compute capability 9.0
  std::lock_guard lock(mutex);
  auto [known, inserted] = hopper.try_emplace(device, false);
  if (inserted) {
    int major = 0, minor = 0;
    ALPHA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    ALPHA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    known->second = major == 9 && minor == 0;
  }
  return known->second;
#else
  (void)bucket;
  return false;  // the library was built without sm_90a code
#endif
}

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
      raise<BackendError>("flash_attention_forward", "cuTensorMapEncodeTiled", "the driver's tensor-map encoder",
                          "not found");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

// The tensor map of one operand [B, T, H, features] (strided; unit stride along the features): rank 4,
// innermost first, boxes of 64 features × 1 head × box_rows rows × 1, 128-byte swizzled, zeros past the ends.
template <class T>
CUtensorMap head_tensor_map(const T* x, const AttentionStrides& strides, int64_t batch, int64_t time, int64_t heads,
                            int64_t features, int box_rows, const char* name) {
  const cuuint64_t dims[4] = {cuuint64_t(features), cuuint64_t(heads), cuuint64_t(time), cuuint64_t(batch)};
  const cuuint64_t byte_strides[3] = {cuuint64_t(strides.head) * sizeof(T), cuuint64_t(strides.time) * sizeof(T),
                                      cuuint64_t(strides.batch) * sizeof(T)};
  const cuuint32_t box[4] = {64, 1, cuuint32_t(box_rows), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult result = tensor_map_encoder()(
      &map, std::is_same_v<T, bf16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<T*>(x), dims, byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    raise<LayoutError>("flash_attention_forward", name,
                       "a layout the copy engine can describe (16-byte aligned, strides multiples of 16 bytes "
                       "below 2^40)",
                       "strides " + std::to_string(strides.batch) + ", " + std::to_string(strides.time) + ", " +
                           std::to_string(strides.head) + " (cuTensorMapEncodeTiled error " +
                           std::to_string(int(result)) + ")");
  return map;
}

template <class T, class Traits>
void launch_tma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  using namespace tma_forward;
  using Shape = TmaForwardShape<Traits>;
  const AttentionParams<T>& p = args.params;
  const TmaForwardArgs<T> params{
      args,
      head_tensor_map(args.q, p.q_strides, p.batch, p.q_len, p.q_heads, p.head_dim, Shape::kRows, "q"),
      head_tensor_map(args.k, p.k_strides, p.batch, p.kv_len, p.kv_heads, p.head_dim, Shape::kKeys, "k"),
      head_tensor_map(args.v, p.v_strides, p.batch, p.kv_len, p.kv_heads, p.value_dim, Shape::kKeys, "v")};
  const dim3 grid(tile_count(p.q_len, Shape::kRows), heads_extent(p.batch * p.q_heads, "flash_attention_forward"));
  launch_with_shared(tma_forward_kernel<T, Traits>, "flash_attention_forward", grid, Shape::kThreads,
                     Shape::kSharedBytes, stream, params);
}

}  // namespace

template <class T>
void flash_attention_wgmma_forward(const AttentionForwardArgs<T>& args, int bucket, cudaStream_t stream) {
  using namespace tma_forward;
  if (bucket == 128) return launch_tma_forward<T, TmaForward128>(args, stream);
  const AttentionParams<T>& p = args.params;
  if (p.kv_len <= (p.causal ? 2048 : 1024)) return launch_tma_forward<T, TmaForward64Short>(args, stream);
  launch_tma_forward<T, TmaForward64Long>(args, stream);
}

template void flash_attention_wgmma_forward<bf16>(const AttentionForwardArgs<bf16>&, int, cudaStream_t);
template void flash_attention_wgmma_forward<f16>(const AttentionForwardArgs<f16>&, int, cudaStream_t);

}  // namespace alpha::kernels::cuda
