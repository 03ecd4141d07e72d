// Flash attention forward for bf16/f16 on Hopper's wgmma (the kernel and its design:
// flash_attention_wgmma_forward.cuh): the library's instantiations, and the rule for when the wgmma kernels
// (this one and flash_attention_wgmma_backward.cu) run.
#include <map>
#include <mutex>

#include "alpha/kernels/cuda/flash_attention_wgmma_forward.cuh"

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
  using namespace wgmma_forward;
  if (bucket == 64) return launch_wgmma_forward<T, WgmmaForwardTraits<64>>(args, stream);
  launch_wgmma_forward<T, WgmmaForwardTraits<128>>(args, stream);
}

template void flash_attention_wgmma_forward<bf16>(const AttentionForwardArgs<bf16>&, int, cudaStream_t);
template void flash_attention_wgmma_forward<f16>(const AttentionForwardArgs<f16>&, int, cudaStream_t);

}  // namespace alpha::kernels::cuda
