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

#define ALPHA_INSTANTIATE(T)                                                               \
  template void cross_entropy<T>(const CrossEntropyArgs<T>&, Stream);                      \
  template void cross_entropy_backward<T>(const CrossEntropyBackwardArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
