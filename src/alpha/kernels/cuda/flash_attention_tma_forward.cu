// Flash attention forward for bf16/f16 on Hopper, warp-specialised with TMA and wgmma (the kernel and its
// design: flash_attention_tma_forward.cuh): the operands' tensor maps, the configuration per head-dimension
// bucket, the library's instantiations, and the rule for when the Hopper kernels (this one and
// flash_attention_wgmma_backward.cu) run.
#include <map>
#include <mutex>

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

constexpr const char* kOp = "flash_attention_forward";

template <class T, class Traits>
void launch_tma_forward(const AttentionForwardArgs<T>& args, cudaStream_t stream) {
  using namespace tma_forward;
  using Shape = TmaForwardShape<Traits>;
  const AttentionParams<T>& p = args.params;
  const TmaForwardArgs<T> params{
      args,
      tma::head_tensor_map(args.q, p.q_strides, p.batch, p.q_len, p.q_heads, p.head_dim, Shape::kRows, kOp, "q"),
      tma::head_tensor_map(args.k, p.k_strides, p.batch, p.kv_len, p.kv_heads, p.head_dim, Shape::kKeys, kOp, "k"),
      tma::head_tensor_map(args.v, p.v_strides, p.batch, p.kv_len, p.kv_heads, p.value_dim, Shape::kKeys, kOp, "v")};
  const dim3 grid(tile_count(p.q_len, Shape::kRows), heads_extent(p.batch * p.q_heads, kOp));
  launch_with_shared(tma_forward_kernel<T, Traits>, kOp, grid, Shape::kThreads,
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
