// CUDA layer norm over rows of contiguous device buffers, taking the CPU backend's argument structs
// (kernels/layernorm.h). Element types: f32, and bf16/f16 storage computing in f32; mean and rstd are f32.
//
// Forward, one kernel: a team (a warp for rows up to kWarpRowMax elements, else a block) per row loads its
// row into registers once (rows.cuh: HeldRow; longer rows read the rest again from L2), then two passes over
// the registers: mean = Σx / C, var = Σ(x − mean)² / C (two-pass: no cancellation of E[x²] − E[x]²), then
// y = (x − mean)·rstd·weight + bias. Writes y, mean and rstd.
// Backward, one kernel for dx and the parameter-gradient partials, plus one small kernel for their sum:
// the team holds dy and x in registers, reduces Σg and Σg·x̂ (g = dy·weight) for dx, and adds dy·x̂ and dy
// into per-column partial sums of its own (registers, written out at the end to its row of a scratch
// [slots, 2·C] matrix; columns past the registers accumulate there directly). A team walks rows
// slot, slot + slots, ... in order. The second kernel adds the slots' partials for each column in a fixed
// order (each of 16 groups sums every 16th slot in order, then a fixed tree over the groups) into
// dweight and dbias. No atomics: the slot count depends only on rows and cols, so the sums have the same
// bits on every run and every GPU.
#include "alpha/kernels/cuda/rows.cuh"
#include "alpha/kernels/layernorm.h"

namespace alpha::kernels::cuda {

namespace {

template <class T, class Team, int V>
__global__ void __launch_bounds__(Team::kThreads) layernorm_kernel(LayerNormArgs<T> a) {
  constexpr int kSlots = Team::kHeld / V;
  __shared__ float scratch[32];
  const int rank = Team::rank();
  const int64_t cols = a.cols, chunks = cols / V;
  const Bits<T>* weight = bits(a.weight);
  const Bits<T>* bias = a.bias ? bits(a.bias) : nullptr;
  for (int64_t r = Team::slot(); r < a.rows; r += Team::slots()) {
    const HeldRow<T, V, kSlots> x(bits(a.x) + r * cols, chunks, rank, Team::kSize);
    float sum = 0.0f;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float f[V];
      x.get(k, j, f);
      for (int v = 0; v < V; ++v) sum += f[v];
    });
    sum = Team::sum(sum, scratch);
    const float mean = cols > 0 ? sum / float(cols) : 0.0f;
    float m2 = 0.0f;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float f[V];
      x.get(k, j, f);
      for (int v = 0; v < V; ++v) m2 += (f[v] - mean) * (f[v] - mean);
    });
    const float rstd = 1.0f / sqrtf(Team::sum(m2, scratch) / float(cols) + a.eps);
    Bits<T>* y = bits(a.y) + r * cols;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float f[V], w[V], b[V] = {}, out[V];
      x.get(k, j, f);
      load_chunk<T, V>(weight, j, w);
      if (bias) load_chunk<T, V>(bias, j, b);
      for (int v = 0; v < V; ++v) {
        const float t = (f[v] - mean) * rstd * w[v];
        out[v] = bias ? t + b[v] : t;
      }
      store_chunk<T, V>(y, j, out);
    });
    if (rank == 0) {
      a.mean[r] = mean;
      a.rstd[r] = rstd;
    }
  }
}

// partials: nullptr when neither dweight nor dbias is wanted, else [slots, 2·cols]: row `slot` holds this
// team's Σ dy·x̂ in [0, cols) and Σ dy in [cols, 2·cols), over the rows it visited.
template <class T, class Team, int V>
__global__ void __launch_bounds__(Team::kThreads) layernorm_backward_kernel(LayerNormBackwardArgs<T> a,
                                                                          float* partials) {
  constexpr int kSlots = Team::kHeld / V;
  __shared__ float scratch[32];
  const int rank = Team::rank();
  const int64_t cols = a.cols, chunks = cols / V;
  const Bits<T>* weight = bits(a.weight);
  float* dweight_part = partials ? partials + Team::slot() * 2 * cols : nullptr;  // (cols)
  float* dbias_part = partials ? dweight_part + cols : nullptr;                    // (cols)
  // The held columns' partials live in registers; the others in the team's row of `partials`, from 0.
  float held_dweight[kSlots][V] = {}, held_dbias[kSlots][V] = {};
  if (partials)
    for (int64_t j = rank + int64_t(kSlots) * Team::kSize; j < chunks; j += Team::kSize)
      for (int v = 0; v < V; ++v) dweight_part[j * V + v] = dbias_part[j * V + v] = 0.0f;

  for (int64_t r = Team::slot(); r < a.rows; r += Team::slots()) {
    const HeldRow<T, V, kSlots> dy(bits(a.dy) + r * cols, chunks, rank, Team::kSize);
    const HeldRow<T, V, kSlots> x(bits(a.x) + r * cols, chunks, rank, Team::kSize);
    const float mean = a.mean[r], rstd = a.rstd[r];
    float mean_g = 0.0f, mean_g_xhat = 0.0f;
    if (a.dx) {
      float sum_g = 0.0f, sum_g_xhat = 0.0f;
      for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
        float fdy[V], fx[V], w[V];
        dy.get(k, j, fdy);
        x.get(k, j, fx);
        load_chunk<T, V>(weight, j, w);
        for (int v = 0; v < V; ++v) {
          const float g = fdy[v] * w[v];
          sum_g += g;
          sum_g_xhat += g * ((fx[v] - mean) * rstd);
        }
      });
      mean_g = Team::sum(sum_g, scratch) / float(cols);
      mean_g_xhat = Team::sum(sum_g_xhat, scratch) / float(cols);
    }
    Bits<T>* dx = a.dx ? bits(a.dx) + r * cols : nullptr;
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float fdy[V], fx[V], w[V], out[V];
      dy.get(k, j, fdy);
      x.get(k, j, fx);
      if (dx) load_chunk<T, V>(weight, j, w);
      for (int v = 0; v < V; ++v) {
        const float xhat = (fx[v] - mean) * rstd;
        if (dx) out[v] = rstd * (fdy[v] * w[v] - mean_g - xhat * mean_g_xhat);
        if (partials) {
          constexpr int slot = decltype(k)::value;
          if constexpr (slot < kSlots) {
            held_dweight[slot][v] += fdy[v] * xhat;
            held_dbias[slot][v] += fdy[v];
          } else {
            dweight_part[j * V + v] += fdy[v] * xhat;
            dbias_part[j * V + v] += fdy[v];
          }
        }
      }
      if (dx) store_chunk<T, V>(dx, j, out);
    });
  }

  if (partials) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int64_t j = rank + int64_t(k) * Team::kSize;
      if (j < chunks)
        for (int v = 0; v < V; ++v) {
          dweight_part[j * V + v] = held_dweight[k][v];
          dbias_part[j * V + v] = held_dbias[k][v];
        }
    }
  }
}

// The parameter-gradient sum: block b takes columns [32·b, 32·b + 32) of partials [slots, 2·cols]; thread
// (group g, lane l) adds slots g, g + 16, ... of its column in order, then a fixed tree adds the 16 groups.
constexpr int kSumColumns = 32;
constexpr int kSumGroups = 16;

template <class T>
__global__ void __launch_bounds__(kSumColumns* kSumGroups)
    layernorm_param_sums_kernel(const float* partials, int64_t slots, int64_t cols, Bits<T>* dweight, Bits<T>* dbias) {
  __shared__ float group_sums[kSumGroups][kSumColumns];
  const int lane = int(threadIdx.x) % kSumColumns, group = int(threadIdx.x) / kSumColumns;
  const int64_t c = int64_t(blockIdx.x) * kSumColumns + lane;  // in [0, 2·cols)
  float s = 0.0f;
  if (c < 2 * cols)
    for (int64_t k = group; k < slots; k += kSumGroups) s += partials[k * 2 * cols + c];
  group_sums[group][lane] = s;
  __syncthreads();
  for (int width = kSumGroups / 2; width > 0; width /= 2) {
    if (group < width) group_sums[group][lane] += group_sums[group + width][lane];
    __syncthreads();
  }
  if (group != 0 || c >= 2 * cols) return;
  const float total = group_sums[0][lane];
  if (c < cols) {
    if (dweight) dweight[c] = Elem<T>::store(total);
  } else if (dbias) {
    dbias[c - cols] = Elem<T>::store(total);
  }
}

// Teams for the backward when parameter gradients are wanted: at most kMaxSlots, and at most
// kMaxPartialFloats floats of partials; the count depends only on rows and cols.
constexpr int64_t kMaxSlots = 1024;
constexpr int64_t kMaxPartialFloats = int64_t(1) << 23;  // 32 MiB

}  // namespace

template <class T>
void layernorm(const LayerNormArgs<T>& args, Stream stream) {
  if (args.rows == 0) return;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const bool vectorised = rows_vectorisable<T>(args.cols, {args.x, args.weight, args.bias, args.y});
  with_row_team<T>(args.cols, vectorised, [&]<class Team, int V>() {
    constexpr auto kernel = layernorm_kernel<T, Team, V>;
    ALPHA_CUDA_LAUNCH(kernel, row_blocks<Team>(args.rows), Team::kThreads, s, args);
  });
}

template <class T>
void layernorm_backward(const LayerNormBackwardArgs<T>& args, Stream stream) {
  const bool params = args.dweight || args.dbias;
  if (args.cols == 0 || (!args.dx && !params)) return;
  cudaStream_t s = alpha::cuda::stream_handle(stream);
  const int64_t rows = args.rows, cols = args.cols;
  const bool vectorised = rows_vectorisable<T>(cols, {args.dy, args.x, args.weight, args.dx});
  with_row_team<T>(cols, vectorised, [&]<class Team, int V>() {
    int64_t teams = rows;
    if (params) teams = std::min({rows, kMaxSlots, std::max<int64_t>(1, kMaxPartialFloats / (2 * cols))});
    const unsigned blocks = row_blocks<Team>(teams);
    const int64_t slots = rows > 0 ? int64_t(blocks) * Team::kTeamsPerBlock : 0;
    StreamScratch partials(params ? size_t(slots * 2 * cols) * sizeof(float) : 0, s);
    if (rows > 0) {
      constexpr auto kernel = layernorm_backward_kernel<T, Team, V>;
      ALPHA_CUDA_LAUNCH(kernel, blocks, Team::kThreads, s, args, params ? partials.as<float>() : nullptr);
    }
    if (params) {
      constexpr auto sums = layernorm_param_sums_kernel<T>;
      const int64_t sum_blocks = (2 * cols + kSumColumns - 1) / kSumColumns;
      ALPHA_CUDA_LAUNCH(sums, unsigned(sum_blocks), kSumColumns * kSumGroups, s, partials.as<float>(), slots, cols,
                        args.dweight ? bits(args.dweight) : nullptr, args.dbias ? bits(args.dbias) : nullptr);
    }
  });
}

#define ALPHA_INSTANTIATE(T)                                                           \
  template void layernorm<T>(const LayerNormArgs<T>&, Stream);                        \
  template void layernorm_backward<T>(const LayerNormBackwardArgs<T>&, Stream);
ALPHA_INSTANTIATE(float)
ALPHA_INSTANTIATE(bf16)
ALPHA_INSTANTIATE(f16)
#undef ALPHA_INSTANTIATE

}  // namespace alpha::kernels::cuda
