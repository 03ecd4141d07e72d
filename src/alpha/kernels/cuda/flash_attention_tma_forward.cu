// Flash attention forward for bf16/f16 on Hopper, warp-specialised with TMA and wgmma (the kernel and its
// design and launcher: flash_attention_tma_forward.cuh): the configuration per head-dimension bucket and key
// range, the library's instantiations, and the rule for when the Hopper kernels (this one and
// flash_attention_wgmma_backward.cu) run.
#include <map>
#include <mutex>
#include <tuple>

#include "alpha/kernels/cuda/flash_attention_tma_forward.cuh"
#include "alpha/kernels/persistent_tiles.h"

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

// Whether a persistent launch of `blocks` resident blocks under a causal mask takes its tiles tile by tile, every
// head's longest first, rather than head by head (kernels/persistent_tiles.h says how and why), worked out on the
// host once per shape and number of resident blocks.
template <class Traits, class T>
bool causal_tiles_by_tile(const AttentionParams<T>& p, int64_t blocks) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  static std::mutex mutex;
  static std::map<Key, bool> known;
  const Key key{blocks, p.batch * p.q_heads, p.q_len, p.kv_len};
  std::lock_guard lock(mutex);
  if (const auto found = known.find(key); found != known.end()) return found->second;
  return known[key] =
             tiles_balance_better_by_tile(p, tma_forward::TmaForwardShape<Traits>::kRows, Traits::kKeys, blocks);
}

}  // namespace

template <class T>
void flash_attention_wgmma_forward(const AttentionForwardArgs<T>& args, int bucket, cudaStream_t stream) {
  using namespace tma_forward;
  const AttentionParams<T>& p = args.params;
  if (bucket == 128) {
    const bool no_window = p.window_left < 0 && p.window_right < 0;
    if (p.dropout_p == 0 && no_window && p.kv_len <= (p.causal ? 4096 : 2048)) {
      if (p.causal) {
        // The model's blocks are the launch's grid.
        const int64_t blocks = tma_forward_resident_blocks<T, TmaForward128PersistentByTile>(p);
        if (causal_tiles_by_tile<TmaForward128PersistentByTile>(p, blocks))
          return launch_tma_forward<T, TmaForward128PersistentByTile>(args, stream);
      }
      return launch_tma_forward<T, TmaForward128Persistent>(args, stream);
    }
    if (p.kv_len <= (p.causal ? 1024 : 512)) return launch_tma_forward<T, TmaForward128Short>(args, stream);
    return launch_tma_forward<T, TmaForward128>(args, stream);
  }
  if (p.kv_len <= (p.causal ? 2048 : 1024)) return launch_tma_forward<T, TmaForward64Short>(args, stream);
  launch_tma_forward<T, TmaForward64Long>(args, stream);
}

template void flash_attention_wgmma_forward<bf16>(const AttentionForwardArgs<bf16>&, int, cudaStream_t);
template void flash_attention_wgmma_forward<f16>(const AttentionForwardArgs<f16>&, int, cudaStream_t);

}  // namespace alpha::kernels::cuda
