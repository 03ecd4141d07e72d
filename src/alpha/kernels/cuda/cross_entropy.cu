// CUDA cross-entropy over rows of logits (N, V) in device memory, taking the CPU backend's argument
// structs (kernels/cross_entropy.h). Element types: f32, and bf16/f16 storage computing in f32.
//
// Forward, two kernels: a team (a warp for V up to kWarpRowMax, else a block) per row streams the row once
// (rows.cuh: stream_row, 128-bit loads between a scalar head and tail, so any V, 50257 included), keeping
// an online max m and Σ exp(x − m) per member (rescaled when m grows); the team combines them as
// M = max m, S = Σ s·exp(m − M) (fixed-order reductions) and writes lse = M + log S and the row's loss
// (M − x_target) + log S (as the CPU computes it) to scratch. A one-block kernel then adds the row losses
// in a fixed order (a fixed stride per thread, then the block reduction), counts the non-ignored rows and
// writes loss = Σ / counted and counted_rows: deterministic, no atomics, nothing read by the host.
// Backward, one kernel: a team per row recomputes p_j = exp(x_j − lse) and writes
// dx_j = factor·(p_j − [j == target]) with 128-bit stores; ignored rows get 0. The factor is args.scale, or
// read from device memory (counted_rows_device, dloss_device) in the kernel.
// With grad (the fused classifier's chunks: gpt2-124m's 4096 × 50304 bf16 logits per chunk, where the forward
// and backward kernels read 412 MB twice and write it once), one kernel: a block per row copies the row into
// shared memory while taking its max, sums exp(x − max) from there, and writes the row's lse, loss and
// gradient, so the logits are read from memory once; the gradient may overwrite them. The mean kernel follows.
#include "alpha/kernels/cross_entropy.h"
#include "alpha/kernels/cuda/rows.cuh"

namespace alpha::kernels::cuda {

namespace {

// row_loss: (N) scratch, the loss of each row (0 for an ignored row).
template <class T, class Team>
__global__ void __launch_bounds__(Team::kThreads) cross_entropy_kernel(CrossEntropyArgs<T> a, float* row_loss) {
  __shared__ float scratch[32];
  const int rank = Team::rank();
  for (int64_t r = Team::slot(); r < a.rows; r += Team::slots()) {
    const Bits<T>* x = bits(a.logits) + r * a.vocab;
    float m = -INFINITY, s = 0.0f;  // this member's running max and Σ exp(x − m)
    stream_row<T>(x, a.vocab, rank, Team::kSize, [&](int64_t, float v) {
      if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
      } else if (v != -INFINITY) {  // −inf adds 0 (and −inf − −inf would be NaN); NaN propagates
        s += expf(v - m);
      }
    });
    const float row_max = Team::max(m, scratch);
    const float log_sum = logf(Team::sum(s == 0.0f ? 0.0f : s * expf(m - row_max), scratch));
    if (rank == 0) {
      a.lse[r] = row_max + log_sum;
      const int32_t target = a.targets[r];
      float loss = 0.0f;
      if (target != a.ignore_index)
        loss = target >= 0 && target < a.vocab ? (row_max - Elem<T>::load(x[target])) + log_sum : NAN;
      row_loss[r] = loss;
    }
  }
}

constexpr int kMeanThreads = 1024;

// One block: loss = Σ row_loss / counted (0 when no row counts), counted = #{r: targets[r] != ignore}.
__global__ void __launch_bounds__(kMeanThreads)
    cross_entropy_mean_kernel(const float* row_loss, const int32_t* targets, int64_t rows, int32_t ignore_index,
                              float* loss, int64_t* counted_rows) {
  __shared__ float scratch[32];
  __shared__ long long warp_counts[kMeanThreads / 32];
  float total = 0.0f;
  long long counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kMeanThreads) {
    total += row_loss[r];
    counted += targets[r] != ignore_index;
  }
  total = block_sum(total, scratch);
  for (int offset = 16; offset > 0; offset /= 2) counted += __shfl_xor_sync(kFullWarp, counted, offset);
  if (threadIdx.x % 32 == 0) warp_counts[threadIdx.x / 32] = counted;
  __syncthreads();
  if (threadIdx.x != 0) return;
  counted = 0;
  for (int w = 0; w < kMeanThreads / 32; ++w) counted += warp_counts[w];
  *counted_rows = counted;
  *loss = counted > 0 ? total / float(counted) : 0.0f;
}

template <class T, class Team>
__global__ void __launch_bounds__(Team::kThreads) cross_entropy_backward_kernel(CrossEntropyBackwardArgs<T> a) {
  const float factor =
      cross_entropy_gradient_factor(a, a.dloss_device ? double(*a.dloss_device) : 0.0);
  const int rank = Team::rank();
  for (int64_t r = Team::slot(); r < a.rows; r += Team::slots()) {
    const int32_t target = a.targets[r];
    Bits<T>* dx = bits(a.dlogits) + r * a.vocab;
    if (target == a.ignore_index) {
      for (int64_t i = rank; i < a.vocab; i += Team::kSize) dx[i] = Elem<T>::store(0.0f);
      continue;
    }
    const bool valid = target >= 0 && target < a.vocab;
    const float lse = a.lse[r];
    map_row<T>(bits(a.logits) + r * a.vocab, dx, a.vocab, rank, Team::kSize, [&](int64_t i, float v) {
      return valid ? factor * (expf(v - lse) - (i == target ? 1.0f : 0.0f)) : NAN;
    });
  }
}

// Threads of a block staging a row: 512 for long rows (gpt2's 100 KB: two blocks per SM, as shared memory
// allows), 128 for rows up to kShortStagedRowBytes (seed's 8 KB: eight blocks per SM, where 512-thread blocks
// fitted two by their registers and kept too few rows in flight).
constexpr int kLongStagedThreads = 512;
constexpr int kShortStagedThreads = 128;
constexpr size_t kShortStagedRowBytes = size_t(16) << 10;
constexpr int kStagedLoadsInFlight = 4;  // 16-byte loads each thread issues before using any

// The shared memory that stages a row of `vocab` elements at any offset within 16 bytes.
template <class T>
size_t staged_row_bytes(int64_t vocab) {
  return size_t(vocab) * sizeof(T) + kVectorBytes;
}

// One block per row (grid-stride). The row is copied into shared memory at its own offset within 16 bytes, so
// that the copy, and stream_row and map_row over the copy, split it into the same head, vectors and tail; the
// vector loads are issued kStagedLoadsInFlight at a time to keep enough bytes in flight with two blocks per
// SM. Then Σ exp(x − max) from shared memory (an element equal to the max adds exactly 1, which keeps a row
// whose max is ±inf as the two-kernel path leaves it), and the gradient written from shared memory.
template <class T, int kStagedThreads>
__global__ void __launch_bounds__(kStagedThreads)
    cross_entropy_with_grad_kernel(CrossEntropyWithGradArgs<T> a, float* row_loss) {
  extern __shared__ uint4 staged_words[];
  __shared__ float scratch[32];
  constexpr int W = kLanes<T>;
  const CrossEntropyArgs<T>& f = a.forward;
  const int rank = int(threadIdx.x);
  for (int64_t r = blockIdx.x; r < f.rows; r += gridDim.x) {
    const Bits<T>* x = bits(f.logits) + r * f.vocab;
    Bits<T>* row = reinterpret_cast<Bits<T>*>(reinterpret_cast<char*>(staged_words) +
                                              reinterpret_cast<uintptr_t>(x) % kVectorBytes);
    const auto [head, vectors, tail] = row_parts<T>(x, f.vocab);
    float m = -INFINITY;
    auto take = [&](float v) { m = fmaxf(m, v); };  // NaN is dropped here and propagates through the sum
    for (int64_t i = rank; i < head; i += kStagedThreads) take(Elem<T>::load(row[i] = x[i]));
    const uint4* x_vectors = reinterpret_cast<const uint4*>(x + head);
    uint4* row_vectors = reinterpret_cast<uint4*>(row + head);
    for (int64_t v0 = rank; v0 < vectors; v0 += int64_t(kStagedThreads) * kStagedLoadsInFlight) {
      uint4 words[kStagedLoadsInFlight];
#pragma unroll
      for (int k = 0; k < kStagedLoadsInFlight; ++k) {
        const int64_t v = v0 + int64_t(k) * kStagedThreads;
        if (v < vectors) words[k] = x_vectors[v];
      }
#pragma unroll
      for (int k = 0; k < kStagedLoadsInFlight; ++k) {
        const int64_t v = v0 + int64_t(k) * kStagedThreads;
        if (v >= vectors) break;
        row_vectors[v] = words[k];
        float e[W];
        unpack<T>(words[k], e);
#pragma unroll
        for (int j = 0; j < W; ++j) take(e[j]);
      }
    }
    for (int64_t i = tail + rank; i < f.vocab; i += kStagedThreads) take(Elem<T>::load(row[i] = x[i]));
    const float row_max = block_max(m, scratch);  // synchronises: the staged row is complete after it
    float s = 0.0f;
    stream_row<T>(row, f.vocab, rank, kStagedThreads,
                  [&](int64_t, float v) { s += v == row_max ? 1.0f : expf(v - row_max); });
    const float log_sum = logf(block_sum(s, scratch));
    const float lse = row_max + log_sum;
    const int32_t target = f.targets[r];
    const bool valid = target >= 0 && target < f.vocab;
    if (rank == 0) {
      f.lse[r] = lse;
      row_loss[r] = target == f.ignore_index ? 0.0f : valid ? (row_max - Elem<T>::load(row[target])) + log_sum : NAN;
    }
    Bits<T>* dx = bits(a.dlogits) + r * f.vocab;
    const float factor = float(a.scale);
    if (target == f.ignore_index) {
      for (int64_t i = rank; i < f.vocab; i += kStagedThreads) dx[i] = Elem<T>::store(0.0f);
    } else {
      map_row<T>(row, dx, f.vocab, rank, kStagedThreads, [&](int64_t i, float v) {
        return valid ? factor * (expf(v - lse) - (i == target ? 1.0f : 0.0f)) : NAN;
      });
    }
    __syncthreads();  // the next row's copy overwrites the staged row
  }
}
}  // namespace

template <class T>
void cross_entropy(const CrossEntropyArgs<T>& args, Stream stream) {
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  StreamScratch row_loss(size_t(args.rows) * sizeof(float), s);
  if (args.rows > 0) {
    with_row_team<T>(args.vocab, false, [&]<class Team, int>() {
      constexpr auto kernel = cross_entropy_kernel<T, Team>;
      ALPHA_CUDA_LAUNCH(kernel, row_blocks<Team>(args.rows), Team::kThreads, s, args, row_loss.as<float>());
    });
  }
  ALPHA_CUDA_LAUNCH(cross_entropy_mean_kernel, 1, kMeanThreads, s, row_loss.as<float>(), args.targets, args.rows,
                    args.ignore_index, args.loss, args.counted_rows);
}

template <class T>
void cross_entropy_backward(const CrossEntropyBackwardArgs<T>& args, Stream stream) {
  if (args.rows == 0 || args.vocab == 0) return;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  with_row_team<T>(args.vocab, false, [&]<class Team, int>() {
    constexpr auto kernel = cross_entropy_backward_kernel<T, Team>;
    ALPHA_CUDA_LAUNCH(kernel, row_blocks<Team>(args.rows), Team::kThreads, s, args);
  });
}

template <class T>
void cross_entropy_with_grad(const CrossEntropyWithGradArgs<T>& args, Stream stream) {
  const CrossEntropyArgs<T>& f = args.forward;
  const size_t bytes = staged_row_bytes<T>(f.vocab);
  if (bytes > block_shared_memory_limit()) {  // a row longer than shared memory: read it twice
    cross_entropy(f, stream);
    cross_entropy_backward(CrossEntropyBackwardArgs<T>{f.logits, f.targets, f.lse, args.dlogits, args.scale, f.rows,
                                                       f.vocab, f.ignore_index},
                           stream);
    return;
  }
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  StreamScratch row_loss(size_t(f.rows) * sizeof(float), s);
  if (f.rows > 0 && f.vocab > 0) {
    auto launch = [&]<int kThreads>() {
      constexpr auto kernel = cross_entropy_with_grad_kernel<T, kThreads>;
      launch_with_shared(kernel, "cross_entropy_with_grad", dim3(unsigned(std::min(f.rows, kMaxRowBlocks))), kThreads,
                         bytes, s, args, row_loss.as<float>());
    };
    if (bytes <= kShortStagedRowBytes)
      launch.template operator()<kShortStagedThreads>();
    else
      launch.template operator()<kLongStagedThreads>();
  }
  ALPHA_CUDA_LAUNCH(cross_entropy_mean_kernel, 1, kMeanThreads, s, row_loss.as<float>(), f.targets, f.rows,
                    f.ignore_index, f.loss, f.counted_rows);
}

#define ALPHA_INSTANTIATE(T)                                                           \
  template void cross_entropy<T>(const CrossEntropyArgs<T>&, Stream);                  \
  template void cross_entropy_backward<T>(const CrossEntropyBackwardArgs<T>&, Stream); \
  template void cross_entropy_with_grad<T>(const CrossEntropyWithGradArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
