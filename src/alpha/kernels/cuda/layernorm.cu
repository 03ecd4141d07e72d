// CUDA layer norm over rows of contiguous device buffers, taking the CPU backend's argument structs
// (kernels/layernorm.h). Element types: f32, and bf16/f16 storage computing in f32; mean and rstd are f32.
//
// Forward, one kernel: a team (a warp for rows up to kWarpRowMax elements, else a block) per row loads its
// row into registers once (rows.cuh: HeldRow; longer rows read the rest again from L2), then two passes over
// the registers: mean = Σx / C, var = Σ(x − mean)² / C (two-pass: no cancellation of E[x²] − E[x]²), then
// y = (x − mean)·rstd·weight + bias. Writes y, mean and rstd.
// Backward, one kernel for dx and the parameter-gradient partials, plus one small kernel for their sum:
// the team holds dy and x in registers, reduces Σg and Σg·x̂ (g = dy·weight) for dx, and adds dy·x̂ and dy
// into per-column partial sums of its own in shared memory (a block team whose row of 2·C floats does not fit
// there keeps them in its block's row of the scratch matrix). A team walks rows slot, slot + slots, ... in
// order; at the end a block adds its teams' partials in team order into its row of a scratch [blocks, 2·C]
// matrix. The second kernel adds the blocks' rows for each column in a fixed order (each of 16 groups sums
// every 16th row in order, then a fixed tree over the groups) into dweight and dbias. No atomics: the block
// count depends only on rows and cols, so the sums have the same bits on every run and every GPU. (The
// partial sums were held in registers beside the rows until 2026-11-28: 235 registers a thread for C 768 in
// bf16, one block of 8 warps per SM, 50 µs for gpt2-124m's 16384 × 768 rows on an H100, 1.5 TB/s.)
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

// A member's chunk of the partial sums: dweight_part += dy·x̂, dbias_part += dy, as 16-byte words for vector
// chunks (the chunks of neighbouring members are V floats apart in shared memory: as single floats a bf16
// chunk's 8 would take 8 times the bank cycles).
template <int V>
__device__ void add_partials(float* dweight_part, float* dbias_part, const float (&dy)[V], const float (&xhat)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int v = 0; v < V; v += 4) {
      float4& w = *reinterpret_cast<float4*>(dweight_part + v);
      float4& b = *reinterpret_cast<float4*>(dbias_part + v);
      w = make_float4(w.x + dy[v] * xhat[v], w.y + dy[v + 1] * xhat[v + 1], w.z + dy[v + 2] * xhat[v + 2],
                      w.w + dy[v + 3] * xhat[v + 3]);
      b = make_float4(b.x + dy[v], b.y + dy[v + 1], b.z + dy[v + 2], b.w + dy[v + 3]);
    }
  } else {
    for (int v = 0; v < V; ++v) {
      dweight_part[v] += dy[v] * xhat[v];
      dbias_part[v] += dy[v];
    }
  }
}

// partials: nullptr when neither dweight nor dbias is wanted, else [gridDim.x, 2·cols]: row b holds block b's
// Σ dy·x̂ in [0, cols) and Σ dy in [cols, 2·cols), over the rows its teams visited. Each team sums its own in a
// row of shared memory when `shared_partials` (the teams' rows side by side, then added in team order into
// the block's row of `partials`), else (a block team whose 2·cols floats exceed shared memory) straight in
// the block's row of `partials`. The member that owns a column is the only one to touch it until the end.
template <class T, class Team, int V>
__global__ void __launch_bounds__(Team::kThreads)
    layernorm_backward_kernel(LayerNormBackwardArgs<T> a, float* partials, bool shared_partials) {
  constexpr int kSlots = Team::kHeld / V;
  extern __shared__ float team_partials[];  // [kTeamsPerBlock, 2·cols] when shared_partials
  __shared__ float scratch[32];
  const int rank = Team::rank();
  const int64_t cols = a.cols, chunks = cols / V;
  const Bits<T>* weight = bits(a.weight);
  float* dweight_part = nullptr;  // (cols), then dbias_part (cols)
  if (partials)
    dweight_part = shared_partials ? team_partials + int64_t(threadIdx.x / Team::kSize) * 2 * cols
                                   : partials + int64_t(blockIdx.x) * 2 * cols;
  float* dbias_part = partials ? dweight_part + cols : nullptr;
  if (partials)
    for (int64_t j = rank; j < chunks; j += Team::kSize)
      for (int v = 0; v < V; ++v) dweight_part[j * V + v] = dbias_part[j * V + v] = 0.0f;

  for (int64_t r = Team::slot(); r < a.rows; r += Team::slots()) {
    const HeldRow<T, V, kSlots> dy(bits(a.dy) + r * cols, chunks, rank, Team::kSize);
    const HeldRow<T, V, kSlots> x(bits(a.x) + r * cols, chunks, rank, Team::kSize);
    Bits<T>* dx = a.dx ? bits(a.dx) + r * cols : nullptr;
    // The residual stream's gradient this dx joins (accumulate_dx), loaded beside dy and x: read after the
    // sums, its latency was a second wait per row (gpt2-124m: 1.04 -> 0.89 ms a step, H200, 2026-11-29).
    const bool accumulate = dx && a.accumulate_dx;
    const HeldRow<T, V, kSlots> earlier(dx, accumulate ? chunks : 0, rank, Team::kSize);
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
    for_each_owned<kSlots>(chunks, rank, Team::kSize, [&](auto k, int64_t j) {
      float fdy[V], fx[V], w[V], out[V];
      dy.get(k, j, fdy);
      x.get(k, j, fx);
      if (dx) load_chunk<T, V>(weight, j, w);
      float xhat[V];
      for (int v = 0; v < V; ++v) {
        xhat[v] = (fx[v] - mean) * rstd;
        if (dx) out[v] = rstd * (fdy[v] * w[v] - mean_g - xhat[v] * mean_g_xhat);
      }
      if (accumulate) {  // added before the one rounding
        float prior[V];
        earlier.get(k, j, prior);
        for (int v = 0; v < V; ++v) out[v] += prior[v];
      }
      if (dx) store_chunk<T, V>(dx, j, out);
      if (partials) add_partials<V>(dweight_part + j * V, dbias_part + j * V, fdy, xhat);
    });
  }

  if (partials && shared_partials) {  // the block's teams' sums, in team order, into its row
    __syncthreads();
    float* block_row = partials + int64_t(blockIdx.x) * 2 * cols;
    for (int64_t c = threadIdx.x; c < 2 * cols; c += Team::kThreads) {
      float sum = 0.0f;
      for (int t = 0; t < Team::kTeamsPerBlock; ++t) sum += team_partials[int64_t(t) * 2 * cols + c];
      block_row[c] = sum;
    }
  }
}

// The parameter-gradient sum: block b takes columns [32·b, 32·b + 32) of partials [slots, 2·cols] (a row per
// backward block); thread
// (group g, lane l) adds slots g, g + 16, ... of its column in order, then a fixed tree adds the 16 groups.
constexpr int kSumColumns = 32;
constexpr int kSumGroups = 16;

__global__ void __launch_bounds__(kSumColumns* kSumGroups)
    layernorm_param_sums_kernel(const float* partials, int64_t slots, int64_t cols, float* dweight, float* dbias) {
  __shared__ float group_sums[kSumGroups][kSumColumns];
  const int lane = int(threadIdx.x) % kSumColumns, group = int(threadIdx.x) / kSumColumns;
  const int64_t c = int64_t(blockIdx.x) * kSumColumns + lane;  // in [0, 2·cols)
  float s = 0.0f;
  if (c < 2 * cols)
#pragma unroll 4
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
    if (dweight) dweight[c] = total;
  } else if (dbias) {
    dbias[c - cols] = total;
  }
}

// Blocks of the backward when parameter gradients are wanted (one row of partials each): at most
// kMaxPartialRows, and at most kMaxPartialFloats floats of partials; the count depends only on rows and cols.
// 256 blocks of 8 warp teams: one wave at two blocks on each of an H100's or H200's 132 SMs (100 registers a
// thread in bf16: their rows held as 16-byte words, the partial sums in shared memory, 48 KB a block at C 768).
constexpr int64_t kMaxPartialRows = 256;
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
    int64_t blocks = row_blocks<Team>(rows);
    if (params) blocks = std::min({blocks, kMaxPartialRows, std::max<int64_t>(1, kMaxPartialFloats / (2 * cols))});
    const size_t shared_bytes = size_t(Team::kTeamsPerBlock * 2 * cols) * sizeof(float);
    // A block team may sum in its row of `partials` instead; warp teams share a block, so they need theirs.
    const bool shared_partials = params && (Team::kTeamsPerBlock > 1 || shared_bytes <= block_shared_memory_limit());
    StreamScratch partials(params ? size_t(blocks * 2 * cols) * sizeof(float) : 0, s);
    if (rows > 0) {
      constexpr auto kernel = layernorm_backward_kernel<T, Team, V>;
      launch_with_shared(kernel, "layernorm_backward", dim3(unsigned(blocks)), Team::kThreads,
                         shared_partials ? shared_bytes : 0, s, args, params ? partials.as<float>() : nullptr,
                         shared_partials);
    }
    if (params) {
      const int64_t sum_blocks = (2 * cols + kSumColumns - 1) / kSumColumns;
      ALPHA_CUDA_LAUNCH(layernorm_param_sums_kernel, unsigned(sum_blocks), kSumColumns * kSumGroups, s,
                        partials.as<float>(), rows > 0 ? blocks : 0, cols, args.dweight, args.dbias);
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
