// Flash attention forward for bf16/f16 on Hopper, warp-specialised with TMA and wgmma (the kernel and its
// design and launcher: flash_attention_tma_forward.cuh): the configuration per head-dimension bucket and key
// range, the library's instantiations, and the rule for when the Hopper kernels (this one and
// flash_attention_wgmma_backward.cu) run.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

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

// A model of a persistent forward's balance under a causal mask: the cost of the most loaded of `blocks` blocks taking
// PersistentTiles' fixed shares, a query tile costing its key tiles plus one (its Q tile and rows).
template <class T>
int64_t most_loaded_block(const AttentionParams<T>& p, int rows, int keys, int64_t blocks, bool by_tile) {
  const int64_t tiles = tile_count(p.q_len, rows), heads = p.batch * p.q_heads, items = tiles * heads;
  std::vector<int64_t> cost(size_t(tiles), 1);  // by tile counted from the end, as PersistentTiles counts them
  for (int64_t from_end = 0; from_end < tiles; ++from_end) {
    const int64_t first_row = (tiles - 1 - from_end) * rows, last_row = std::min(first_row + rows, p.q_len) - 1;
    const int64_t begin = visible_key_range(p, first_row).begin, end = visible_key_range(p, last_row).end;
    if (end > begin) cost[size_t(from_end)] += (end - begin + keys - 1) / keys;
  }
  int64_t most = 0;
  for (int64_t x = 0; x < blocks; ++x) {
    int64_t load = 0;
    for (int64_t round = 0;; ++round) {
      const int64_t item = round * blocks + (round % 2 == 0 ? x : blocks - 1 - x);
      if (item >= items) break;
      load += cost[size_t(by_tile ? item / heads : item % tiles)];
    }
    most = std::max(most, load);
  }
  return most;
}

// Whether a persistent launch under a causal mask takes its tiles tile by tile, every head's longest first, rather
// than head by head. Head by head, the blocks running at once share a head's K and V and run 4-19% faster where both
// orders balance (2026-11-30, bench/tma_forward_configs.cu on an H200, 14 causal D 128 shapes); but with few tiles a
// block its fixed shares can leave one block far more than the mean, and tile by tile then wins (1.06-1.47× at the
// four shapes where the model below has head by head's most loaded block over 1.1× tile by tile's, 0.84-0.96× at the
// ten where it has them within 3%). With more than 64 tiles a block, head by head (the model's cost grows with them).
template <class Traits, class T>
bool causal_tiles_by_tile(const AttentionParams<T>& p) {
  constexpr int kRows = tma_forward::TmaForwardShape<Traits>::kRows;
  const int64_t blocks = int64_t(device_attribute(cudaDevAttrMultiProcessorCount)) * Traits::kMinBlocks;
  if (tile_count(p.q_len, kRows) * p.batch * p.q_heads > 64 * blocks) return false;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  static std::mutex mutex;
  static std::map<Key, bool> known;
  const Key key{blocks, p.batch * p.q_heads, p.q_len, p.kv_len};
  std::lock_guard lock(mutex);
  if (const auto found = known.find(key); found != known.end()) return found->second;
  const int64_t by_head = most_loaded_block(p, kRows, Traits::kKeys, blocks, false);
  const int64_t by_tile = most_loaded_block(p, kRows, Traits::kKeys, blocks, true);
  return known[key] = 10 * by_head > 11 * by_tile;
}

}  // namespace

template <class T>
void flash_attention_wgmma_forward(const AttentionForwardArgs<T>& args, int bucket, cudaStream_t stream) {
  using namespace tma_forward;
  const AttentionParams<T>& p = args.params;
  if (bucket == 128) {
    const bool no_window = p.window_left < 0 && p.window_right < 0;
    if (p.dropout_p == 0 && no_window && p.kv_len <= (p.causal ? 4096 : 2048)) {
      if (p.causal && causal_tiles_by_tile<TmaForward128PersistentByTile>(p))
        return launch_tma_forward<T, TmaForward128PersistentByTile>(args, stream);
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
