// The building blocks of the f32 (FMA) attention kernels: flash attention's f32 forward and backward
// (flash_attention.cu) and the attention JVP (attention_jvp.cu). They stage f32 copies of the operands in
// shared memory (any T, converted on load), compute dot products with plain FMA loops, and split the rows of
// a register accumulator among groups of threads inside one warp:
// - entries: thread e computes entries e, e + kThreads, ... of a `queries` × `keys` tile in row-major order
//   (a warp covers consecutive keys of one query row), each a dot product over D (and Dv) in shared memory;
// - rows (RowOwnership): the rows of an accumulator are split among threads_per_row consecutive threads;
//   thread t of a group owns the columns t, t + threads_per_row, ...
// Shared-memory tiles are f32, rows padded by one float so that a warp reading one column of consecutive
// rows hits distinct banks; their sizes depend on the run-time D and Dv (dynamic shared memory), and the
// host sizes a block with the same Carver the kernel carves it with.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "alpha/core/error.h"
#include "alpha/kernels/attention_reference.h"
#include "alpha/kernels/cuda/common.cuh"

namespace alpha::kernels::cuda::fma_tiles {

// Threads of every f32 attention kernel.
constexpr int kThreads = 256;

// A tile of `queries` query rows by `keys` key rows.
struct Tiling {
  int queries;
  int keys;
};

// The widest head dimension (D or Dv) the f32 kernels are built for.
constexpr int kMaxHeadDim = 256;

// The rows of an accumulator split among threads: `rows` rows, kThreads / rows threads per row, each
// owning kBucket / threads_per_row columns.
template <int kRows, int kBucket>
struct RowOwnership {
  static constexpr int kPerRow = kThreads / kRows;
  static constexpr int kWidth = kBucket / kPerRow;
  static_assert(kThreads % kRows == 0 && 32 % kPerRow == 0, "a row's threads are a group inside one warp");
  static_assert(kBucket % kPerRow == 0, "the columns split evenly");
  int row;   // the accumulator row of this thread
  int lane;  // its place in the row's group; its columns: lane + kPerRow·k, k < kWidth
  __device__ RowOwnership() : row(int(threadIdx.x) / kPerRow), lane(int(threadIdx.x) % kPerRow) {}
  __device__ int column(int k) const { return lane + kPerRow * k; }
};

// Sum and max over the kGroup consecutive lanes of a row's group (a fixed butterfly: every lane gets the
// same bits). Every lane of the warp must call it.
template <int kGroup>
__device__ float group_sum(float v) {
  for (int offset = kGroup / 2; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}
template <int kGroup>
__device__ float group_max(float v) {
  for (int offset = kGroup / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

// A rows × width f32 tile in shared memory, rows padded by one float.
struct SharedTile {
  float* data;
  int stride;
  __device__ float& operator()(int row, int column) const { return data[row * stride + column]; }
};

// Hands out consecutive tiles of one shared-memory block; with a null base it only counts (the host sizes
// the block with the same code the kernel carves it with).
struct Carver {
  float* base;
  int64_t used = 0;
  __host__ __device__ SharedTile take(int rows, int width) {
    SharedTile tile{base ? base + used : nullptr, width + 1};
    used += int64_t(rows) * (width + 1);
    return tile;
  }
};

// tile(r, d) = rows[(first + r)·row_stride + d] as f32 for r < count, d < width; 0 for rows past `total`.
template <class T>
__device__ void load_rows(SharedTile tile, const Bits<T>* rows, int64_t row_stride, int64_t first, int64_t total,
                          int count, int width) {
  for (int e = threadIdx.x; e < count * width; e += kThreads) {
    const int r = e / width, d = e % width;
    const int64_t row = first + r;
    tile(r, d) = row < total ? Elem<T>::load(rows[row * row_stride + d]) : 0.0f;
  }
}

// Whether query i (< Tq) sees key j.
template <class T>
__device__ bool visible(const AttentionParams<T>& p, int64_t i, int64_t j) {
  if (i >= p.q_len) return false;
  const KeyRange range = visible_key_range(p, i);
  return j >= range.begin && j < range.end;
}

// S = softcap(dot·scale).
template <class T>
__device__ float score(const AttentionParams<T>& p, float dot) {
  const float s = dot * p.scale;
  return p.softcap > 0 ? p.softcap * tanhf(s / p.softcap) : s;
}

__device__ inline float dot(SharedTile a, int row_a, SharedTile b, int row_b, int depth) {
  float sum = 0.0f;
  for (int d = 0; d < depth; ++d) sum = fmaf(a(row_a, d), b(row_b, d), sum);
  return sum;
}

// The rows of a tile of `tile` rows starting at `first`, out of `total`.
__device__ inline int rows_in_tile(int64_t first, int tile, int64_t total) {
  return total - first < tile ? int(total - first) : tile;
}

// The keys the queries [i0, i0 + count) see, together: [begin of the first row, end of the last row).
template <class T>
__device__ KeyRange tile_key_range(const AttentionParams<T>& p, int64_t i0, int count) {
  return {visible_key_range(p, i0).begin, visible_key_range(p, i0 + count - 1).end};
}

// The kernels' bucket for these head dimensions; ShapeError beyond the widest.
template <class T>
int bucket(const AttentionParams<T>& p, const char* op) {
  const int64_t widest = std::max(p.head_dim, p.value_dim);
  if (p.head_dim < 1 || p.value_dim < 1 || widest > kMaxHeadDim)
    raise<ShapeError>(op, "head_dim, value_dim",
                      "1 to " + std::to_string(kMaxHeadDim) + " (the f32 attention kernels' tiles)",
                      std::to_string(p.head_dim) + ", " + std::to_string(p.value_dim));
  return widest <= 64 ? 64 : widest <= 128 ? 128 : 256;
}

}  // namespace alpha::kernels::cuda::fma_tiles
