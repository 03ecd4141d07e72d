// Flash attention forward for bf16/f16 on Hopper, warp-specialised with TMA and wgmma (the kernel and its
// design and launcher: flash_attention_tma_forward.cuh): the configuration per head-dimension bucket and key
// range, the library's instantiations, and the rule for when the Hopper kernels (this one and
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

template <class T>
void flash_attention_wgmma_forward(const AttentionForwardArgs<T>& args, int bucket, cudaStream_t stream) {
  using namespace tma_forward;
  const AttentionParams<T>& p = args.params;
  if (bucket == 128) {
    const bool even_tiles = !p.causal && p.window_left < 0 && p.window_right < 0;  // PersistentTiles' fixed shares
    if (p.kv_len <= 2048 && p.dropout_p == 0 && even_tiles)
      return launch_tma_forward<T, TmaForward128Persistent>(args, stream);
    if (p.kv_len <= (p.causal ? 1024 : 512)) return launch_tma_forward<T, TmaForward128Short>(args, stream);
    return launch_tma_forward<T, TmaForward128>(args, stream);
  }
  if (p.kv_len <= (p.causal ? 2048 : 1024)) return launch_tma_forward<T, TmaForward64Short>(args, stream);
  launch_tma_forward<T, TmaForward64Long>(args, stream);
}

template void flash_attention_wgmma_forward<bf16>(const AttentionForwardArgs<bf16>&, int, cudaStream_t);
template void flash_attention_wgmma_forward<f16>(const AttentionForwardArgs<f16>&, int, cudaStream_t);

}  // namespace alpha::kernels::cuda
