// CUDA embedding lookup and its deterministic backward over device buffers, taking the CPU backend's
// argument structs (kernels/embedding.h). Element types: f32, and bf16/f16 storage; the backward writes the
// table gradient in dy's type or, beside bf16/f16 dy, in f32.
//
// Forward: a grid-stride copy of table rows, one chunk (one element, or one 128-bit vector when C and the
// pointers allow) per thread step; bits are copied, not converted. An id outside [0, V) (which the op layer
// rejects before launching) gives a NaN row instead of a read out of bounds.
// Backward, five steps and no atomics: (1) keys[i] = ids[i] (V for an id outside [0, V), a bucket that is
// never written) and order[i] = i; (2) CUB's radix sort of (key, position) pairs, which is stable, so the
// positions of each id come out in increasing order; (3) each key's run of sorted positions, marked where
// neighbouring keys differ; (4a) one block per tile of 32 sorted positions, each thread summing its columns'
// dy over each run in the tile in position order, in f64 (kRowsAhead rows' loads in flight at a time): a run
// that is its id's whole run is rounded into the table's row, one that crosses the tile's edge is kept
// as an f64 partial; (4b) one block per table row: 0 where no position has the id, else, for a run that
// crosses tiles, its partials summed in tile order and rounded once. Until the eighteenth session step 4 was
// one block per row summing the row's whole run: a frequent id's run of thousands of positions, summed by one
// thread per column, took most of the backward's time. The order of every addition is fixed by the ids alone,
// so the result has the same bits on every run. It is the CPU kernel's f64 sum (in position order)
// associated by tiles: after rounding the two agree except where a sum lies within an f64 rounding of the
// midpoint between two values of the gradient's type. Scratch (keys, positions, the run tables, the partials,
// CUB's temporary storage) is stream-ordered; the partials, 2 × ⌈N/32⌉ × C f64, are the most of it: a quarter
// of a bf16 dy's bytes.
#include <cub/device/device_radix_sort.cuh>

#include <bit>
#include <string>

#include "alpha/core/error.h"
#include "alpha/kernels/cuda/common.cuh"
#include "alpha/kernels/embedding.h"

namespace alpha::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;

// One chunk of V elements copied as bits: V = 1, or kLanes<T> (a 16-byte vector).
template <class T, int V>
__device__ void copy_chunk(const Bits<T>* from, Bits<T>* to, int64_t j) {
  if constexpr (V == 1) to[j] = from[j];
  else reinterpret_cast<uint4*>(to)[j] = reinterpret_cast<const uint4*>(from)[j];
}

template <class T, int V>
__global__ void __launch_bounds__(kThreads) embedding_kernel(EmbeddingArgs<T> a) {
  const int64_t C = a.channels, chunks = C / V;
  const int64_t total = a.positions * chunks;
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < total; e += int64_t(gridDim.x) * kThreads) {
    const int64_t i = e / chunks, j = e % chunks;
    const int32_t id = a.ids[i];
    Bits<T>* out = bits(a.out) + i * C;
    if (id >= 0 && id < a.vocab) {
      copy_chunk<T, V>(bits(a.table) + int64_t(id) * C, out, j);
    } else {
      const Bits<T> nan = Elem<T>::store(NAN);
      for (int v = 0; v < V; ++v) out[j * V + v] = nan;
    }
  }
}

// Step 1: the sort's input pairs.
__global__ void __launch_bounds__(kThreads)
    embedding_keys_kernel(const int32_t* ids, int64_t positions, int64_t vocab, uint32_t* keys, int32_t* order) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < positions; i += int64_t(gridDim.x) * kThreads) {
    const int32_t id = ids[i];
    keys[i] = id >= 0 && id < vocab ? uint32_t(id) : uint32_t(vocab);
    order[i] = int32_t(i);
  }
}

// Step 3: each key's run [run_begin[key], run_end[key]) of the sorted pairs (both left 0 for a key that no
// position has): one thread per sorted position, writing where a run starts or ends.
__global__ void __launch_bounds__(kThreads)
    embedding_runs_kernel(const uint32_t* keys, int64_t n, int32_t* run_begin, int32_t* run_end) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const uint32_t key = keys[i];
    if (i == 0 || keys[i - 1] != key) run_begin[key] = int32_t(i);
    if (i + 1 == n || keys[i + 1] != key) run_end[key] = int32_t(i + 1);
  }
}

constexpr int kRowThreads = 128;
// Positions whose rows one thread loads before adding them: the additions stay in position order, but the
// loads overlap instead of waiting for each other.
constexpr int kRowsAhead = 4;
// Sorted positions per tile of step 4. A frequent id's run is summed by many tiles at once: one block per
// row summing a 2,000-position run alone set the whole backward's time (gpt2-124m on the built-in corpus).
constexpr int kTile = 32;

// One chunk of V elements of dy's row `position`, in f32.
template <class T, class G, int V>
__device__ void load_chunk(const EmbeddingBackwardArgs<T, G>& a, int32_t position, int64_t j, float (&f)[V]) {
  const Bits<T>* dy = bits(a.dy) + int64_t(position) * a.channels;
  if constexpr (V == 1) f[0] = Elem<T>::load(dy[j]);
  else unpack<T>(reinterpret_cast<const uint4*>(dy)[j], f);
}

// Chunk j (V elements) of dtable's row `row`, rounded from f64 to f32 and to G: one 128-bit vector per
// kLanes<G> elements (two for a chunk of eight bf16 columns into an f32 gradient).
template <class T, class G, int V>
__device__ void store_chunk(const EmbeddingBackwardArgs<T, G>& a, int64_t row, int64_t j, const double (&sum)[V]) {
  Bits<G>* out = bits(a.dtable) + row * a.channels + j * V;
  if constexpr (V == 1) {
    out[0] = Elem<G>::store(float(a.accumulate ? sum[0] + double(Elem<G>::load(out[0])) : sum[0]));
  } else {
    constexpr int kVector = kLanes<G>;
    static_assert(V % kVector == 0, "a chunk is whole vectors of G");
    for (int q = 0; q < V / kVector; ++q) {
      float rounded[kVector];
      if (a.accumulate) unpack<G>(reinterpret_cast<const uint4*>(out)[q], rounded);  // the values added to
      for (int u = 0; u < kVector; ++u)
        rounded[u] = float(a.accumulate ? sum[q * kVector + u] + double(rounded[u]) : sum[q * kVector + u]);
      reinterpret_cast<uint4*>(out)[q] = pack<G>(rounded);
    }
  }
}

// The f64 partial sums of the runs that cross a tile's edge: `head` holds the tile's first run (the whole
// tile when one id fills it), `tail` its last run when that is another id's. (tiles, C) each.
struct TilePartials {
  double* head;
  double* tail;
};

// Step 4a: one block per tile of kTile sorted positions, each thread summing its columns over the tile's
// runs in position order. A run that is its id's whole run is rounded into dtable; one that crosses the
// tile's edge goes to the tile's head or tail partial. Ids outside [0, V) (key V) are dropped.
template <class T, class G, int V>
__global__ void __launch_bounds__(kRowThreads)
    embedding_tile_sums_kernel(EmbeddingBackwardArgs<T, G> a, const uint32_t* keys, const int32_t* order,
                               const int32_t* run_begin, const int32_t* run_end, TilePartials partials) {
  __shared__ uint32_t tile_keys[kTile];
  __shared__ int32_t tile_order[kTile];
  const int64_t C = a.channels, chunks = C / V, tiles = (a.positions + kTile - 1) / kTile;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int begin = int(t * kTile), size = a.positions - begin < kTile ? int(a.positions - begin) : kTile;
    __syncthreads();  // the previous tile's keys are read
    if (threadIdx.x < size) {
      tile_keys[threadIdx.x] = keys[begin + threadIdx.x];
      tile_order[threadIdx.x] = order[begin + threadIdx.x];
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < chunks; j += kRowThreads) {
      double sum[V] = {};
      int run_start = 0;
      // Ends the run [run_start, k): rounded into dtable when it is its id's whole run, else a partial.
      auto flush = [&](int k) {
        const uint32_t key = tile_keys[run_start];
        if (key < a.vocab) {
          if (run_begin[key] == begin + run_start && run_end[key] == begin + k) {
            store_chunk<T, G, V>(a, key, j, sum);
          } else {
            double* partial = (run_start == 0 ? partials.head : partials.tail) + t * C + j * V;
            for (int u = 0; u < V; ++u) partial[u] = sum[u];
          }
        }
        for (int u = 0; u < V; ++u) sum[u] = 0.0;
        run_start = k;
      };
      for (int k0 = 0; k0 < size; k0 += kRowsAhead) {
        float f[kRowsAhead][V];
#pragma unroll
        for (int r = 0; r < kRowsAhead; ++r)
          if (k0 + r < size) load_chunk<T, G, V>(a, tile_order[k0 + r], j, f[r]);
#pragma unroll
        for (int r = 0; r < kRowsAhead; ++r) {
          const int k = k0 + r;
          if (k >= size) break;
          if (tile_keys[k] != tile_keys[run_start]) flush(k);
          for (int u = 0; u < V; ++u) sum[u] += double(f[r][u]);
        }
      }
      flush(size);
    }
  }
}

// Step 4b: one block per table row. A row no position uses gets 0 (accumulating: is left alone); one whose run lies in
// one tile was written by step 4a; one whose run crosses tiles sums its partials in tile order: its part of its first
// tile (that tile's tail, or its head when the run starts the tile), the heads of the tiles it fills, and
// the head of its last tile.
template <class T, class G, int V>
__global__ void __launch_bounds__(kRowThreads)
    embedding_rows_kernel(EmbeddingBackwardArgs<T, G> a, const int32_t* run_begin, const int32_t* run_end,
                          TilePartials partials) {
  const int64_t C = a.channels, chunks = C / V;
  for (int64_t v = blockIdx.x; v < a.vocab; v += gridDim.x) {
    const int64_t begin = run_begin ? run_begin[v] : 0, end = run_end ? run_end[v] : 0;
    const int64_t first_tile = begin / kTile, last_tile = (end - 1) / kTile;
    if (end > begin && first_tile == last_tile) continue;
    if (end == begin && a.accumulate) continue;  // an unused row keeps its values
    for (int64_t j = threadIdx.x; j < chunks; j += kRowThreads) {
      double sum[V] = {};
      for (int64_t t = first_tile; end > begin && t <= last_tile; ++t) {
        const double* partial = (t == first_tile && begin % kTile != 0 ? partials.tail : partials.head) + t * C + j * V;
        for (int u = 0; u < V; ++u) sum[u] += partial[u];
      }
      store_chunk<T, G, V>(a, v, j, sum);
    }
  }
}

bool aligned(const void* p) { return misalignment(p) == 0; }

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

template <class T>
void embedding(const EmbeddingArgs<T>& args, Stream stream) {
  const int64_t total = args.positions * args.channels;
  if (total == 0) return;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  auto launch = [&]<int V>() {
    const int64_t work = total / V;
    const unsigned blocks = unsigned(std::min((work + kThreads - 1) / kThreads, kMaxBlocks));
    constexpr auto kernel = embedding_kernel<T, V>;
    ALPHA_CUDA_LAUNCH(kernel, blocks, kThreads, s, args);
  };
  if (args.channels % kLanes<T> == 0 && aligned(args.table) && aligned(args.out)) launch.template operator()<kLanes<T>>();
  else launch.template operator()<1>();
}

template <class T, class G>
void embedding_backward(const EmbeddingBackwardArgs<T, G>& args, Stream stream) {
  if (args.vocab == 0 || args.channels == 0) return;
  if (args.positions > INT32_MAX)
    raise<ValueError>("embedding_backward", "positions", "at most 2^31 - 1 positions (CUDA kernel)",
                      std::to_string(args.positions));
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int n = int(args.positions);
  // Keys are ids in [0, vocab] (vocab: the bucket of invalid ids): the sort looks at their low end_bit bits.
  const int end_bit = std::max(1, int(std::bit_width(uint64_t(args.vocab))));
  size_t cub_bytes = 0;
  if (n > 0)
    ALPHA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const uint32_t*>(nullptr),
                                                     static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                     static_cast<int32_t*>(nullptr), n, 0, end_bit, s));
  const size_t keys_bytes = round_up(size_t(n) * sizeof(uint32_t)), order_bytes = round_up(size_t(n) * sizeof(int32_t));
  const size_t runs_bytes = round_up(size_t(args.vocab + 1) * sizeof(int32_t));  // keys 0..vocab
  const int64_t tiles = (n + kTile - 1) / kTile;
  const size_t partials_bytes = round_up(size_t(tiles * args.channels) * sizeof(double));  // head or tail
  // Offsets in the scratch: keys (in, sorted), positions (in, sorted), run tables, tile partials, CUB's.
  const size_t order_at = 2 * keys_bytes, runs_at = order_at + 2 * order_bytes, partials_at = runs_at + 2 * runs_bytes,
               cub_at = partials_at + 2 * partials_bytes;
  StreamScratch scratch(n > 0 ? cub_at + cub_bytes : 0, s);
  uint32_t* keys = nullptr;
  int32_t *order = nullptr, *run_begin = nullptr, *run_end = nullptr;
  TilePartials partials{nullptr, nullptr};
  if (n > 0) {
    uint32_t* keys_in = scratch.as<uint32_t>(0);
    keys = scratch.as<uint32_t>(keys_bytes);
    int32_t* order_in = scratch.as<int32_t>(order_at);
    order = scratch.as<int32_t>(order_at + order_bytes);
    run_begin = scratch.as<int32_t>(runs_at);
    run_end = scratch.as<int32_t>(runs_at + runs_bytes);
    partials = {scratch.as<double>(partials_at), scratch.as<double>(partials_at + partials_bytes)};
    void* cub_storage = scratch.as<char>(cub_at);
    const unsigned blocks = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
    ALPHA_CUDA_LAUNCH(embedding_keys_kernel, blocks, kThreads, s, args.ids, args.positions, args.vocab, keys_in, order_in);
    ALPHA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_storage, cub_bytes, keys_in, keys, order_in, order, n, 0,
                                                     end_bit, s));
    ALPHA_CUDA_CHECK(cudaMemsetAsync(run_begin, 0, 2 * runs_bytes, s));  // both tables: every run empty
    ALPHA_CUDA_LAUNCH(embedding_runs_kernel, blocks, kThreads, s, keys, args.positions, run_begin, run_end);
  }
  const bool vectorised = args.channels % kLanes<T> == 0 && aligned(args.dy) && aligned(args.dtable);
  auto launch = [&]<int V>() {
    if (n > 0) {
      constexpr auto kernel = embedding_tile_sums_kernel<T, G, V>;
      const unsigned blocks = unsigned(std::min<int64_t>(tiles, kMaxBlocks));
      ALPHA_CUDA_LAUNCH(kernel, blocks, kRowThreads, s, args, keys, order, run_begin, run_end, partials);
    }
    constexpr auto kernel = embedding_rows_kernel<T, G, V>;
    const unsigned blocks = unsigned(std::min<int64_t>(args.vocab, kMaxBlocks));
    ALPHA_CUDA_LAUNCH(kernel, blocks, kRowThreads, s, args, run_begin, run_end, partials);
  };
  if (vectorised)
    launch.template operator()<kLanes<T>>();
  else
    launch.template operator()<1>();
}

#define ALPHA_INSTANTIATE(T)                                   \
  template void embedding<T>(const EmbeddingArgs<T>&, Stream); \
  template void embedding_backward<T, T>(const EmbeddingBackwardArgs<T, T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE
template void embedding_backward<bf16, float>(const EmbeddingBackwardArgs<bf16, float>&, Stream);
template void embedding_backward<f16, float>(const EmbeddingBackwardArgs<f16, float>&, Stream);

}  // namespace alpha::kernels::cuda
