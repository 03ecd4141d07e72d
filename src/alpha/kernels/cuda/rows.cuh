// Device-side building blocks of the row kernels (layer norm, softmax, cross-entropy): who works on a row
// (a team: one warp, or one whole block), how a team member walks its part of the row (chunks of one element,
// or of one 128-bit vector), and the part of the row a member holds in registers between passes.
//
// A team of kSize members owns one row at a time; member `rank` owns the chunks j = rank, rank + kSize, ...
// (chunk j is elements [j·V, j·V + V)), the same columns for every row, so per-column partial sums stay with
// one member. Teams walk the rows in a grid-stride loop: team `slot` takes rows slot, slot + slots, ...
// Reductions over a row go through Team::sum / Team::max (common.cuh's fixed-order warp and block
// reductions), so their results do not depend on anything but the row's length.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "alpha/kernels/cuda/common.cuh"

namespace alpha::kernels::cuda {

// One warp per row, kThreads / 32 rows per block at a time: rows of up to kRegisterRow elements stay in
// registers (kHeld elements per lane).
struct WarpTeam {
  static constexpr int kThreads = 256;
  static constexpr int kSize = 32;
  static constexpr int kTeamsPerBlock = kThreads / kSize;
  static constexpr int kHeld = 32;
  __device__ static int rank() { return int(threadIdx.x % kSize); }
  __device__ static int64_t slot() { return int64_t(blockIdx.x) * kTeamsPerBlock + threadIdx.x / kSize; }
  __device__ static int64_t slots() { return int64_t(gridDim.x) * kTeamsPerBlock; }
  __device__ static float sum(float v, float*) { return warp_sum(v); }
  __device__ static float max(float v, float*) { return warp_max(v); }
};

// One block per row: rows of up to kThreads · kHeld elements stay in registers, longer ones are read again
// from memory (L2) for each pass past that.
struct BlockTeam {
  static constexpr int kThreads = 512;
  static constexpr int kSize = kThreads;
  static constexpr int kTeamsPerBlock = 1;
  static constexpr int kHeld = 16;
  __device__ static int rank() { return int(threadIdx.x); }
  __device__ static int64_t slot() { return int64_t(blockIdx.x); }
  __device__ static int64_t slots() { return int64_t(gridDim.x); }
  // `scratch`: 32 floats of shared memory; every thread of the block must call.
  __device__ static float sum(float v, float* scratch) { return block_sum(v, scratch); }
  __device__ static float max(float v, float* scratch) { return block_max(v, scratch); }
};

// Rows up to this length go to a warp, longer ones to a block.
constexpr int64_t kWarpRowMax = int64_t(WarpTeam::kSize) * WarpTeam::kHeld;
// Grid limit of the row kernels: teams beyond it loop over rows.
constexpr int64_t kMaxRowBlocks = 1 << 16;

// One chunk of V elements as f32: V = 1 (any address) or V = kLanes<T> (one 16-byte aligned vector).
template <class T, int V>
__device__ void load_chunk(const Bits<T>* row, int64_t j, float (&f)[V]) {
  if constexpr (V == 1) {
    f[0] = Elem<T>::load(row[j]);
  } else {
    static_assert(V == kLanes<T>, "a vector chunk is one 128-bit word");
    unpack<T>(*reinterpret_cast<const uint4*>(row + j * V), f);
  }
}
template <class T, int V>
__device__ void store_chunk(Bits<T>* row, int64_t j, const float (&f)[V]) {
  if constexpr (V == 1) {
    row[j] = Elem<T>::store(f[0]);
  } else {
    static_assert(V == kLanes<T>, "a vector chunk is one 128-bit word");
    *reinterpret_cast<uint4*>(row + j * V) = pack<T>(f);
  }
}

// A member's k-th chunk as a compile-time index: k < kSlots names a register slot, k == kSlots a chunk past
// the registers (read from memory each time).
template <int k> using Slot = std::integral_constant<int, k>;

// Calls fn(Slot<k>{}, j) for every chunk j < chunks the member owns: first the register slots
// k = 0 .. kSlots − 1 (j = rank + k·size, unrolled), then the rest with k = kSlots.
template <int kSlots, class Fn>
__device__ void for_each_owned(int64_t chunks, int rank, int size, Fn&& fn) {
  [&]<int... k>(std::integer_sequence<int, k...>) {
    ((rank + int64_t(k) * size < chunks ? fn(Slot<k>{}, rank + int64_t(k) * size) : void()), ...);
  }(std::make_integer_sequence<int, kSlots>{});
  for (int64_t j = rank + int64_t(kSlots) * size; j < chunks; j += size) fn(Slot<kSlots>{}, j);
}

// The chunks of one row a member owns, the first kSlots of them loaded into registers at construction, as
// they are in memory (a 16-byte word per vector chunk: half the registers of f32 for bf16 and f16), converted
// to f32 by each get.
template <class T, int V, int kSlots>
struct HeldRow {
  using Word = std::conditional_t<V == 1, Bits<T>, uint4>;
  const Bits<T>* row;
  Word held[kSlots];

  __device__ HeldRow(const Bits<T>* row_, int64_t chunks, int rank, int size) : row(row_) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int64_t j = rank + int64_t(k) * size;
      if (j < chunks) held[k] = reinterpret_cast<const Word*>(row)[j];
    }
  }
  // Chunk j, the member's k-th: from its register slot, or read again from memory.
  template <int k>
  __device__ void get(Slot<k>, int64_t j, float (&f)[V]) const {
    if constexpr (k < kSlots) {
      if constexpr (V == 1)
        f[0] = Elem<T>::load(held[k]);
      else
        unpack<T>(held[k], f);
    } else {
      load_chunk<T, V>(row, j, f);
    }
  }
};

// How a row of n elements at `row` splits for 16-byte vectors: a scalar head up to the first 16-byte boundary,
// `vectors` whole vectors, and a scalar tail from element `tail` on.
struct RowParts {
  int64_t head;
  int64_t vectors;
  int64_t tail;
};
template <class T>
__device__ RowParts row_parts(const void* row, int64_t n) {
  const int64_t offset = int64_t(reinterpret_cast<uintptr_t>(row) % kVectorBytes);
  const int64_t to_boundary = (kVectorBytes - offset) % kVectorBytes / int64_t(sizeof(T));
  const int64_t head = to_boundary < n ? to_boundary : n;
  const int64_t vectors = (n - head) / kLanes<T>;
  return {head, vectors, head + vectors * kLanes<T>};
}

// Calls fn(i, x_i) for the elements i in [0, n) of `row` that member `rank` of a team of `size` owns when the
// row is streamed once (no registers kept): 16-byte vectors where the row allows, with a scalar head up to
// the first 16-byte boundary and a scalar tail. Every element is visited by exactly one member.
template <class T, class Fn>
__device__ void stream_row(const Bits<T>* row, int64_t n, int rank, int size, Fn&& fn) {
  constexpr int W = kLanes<T>;
  const auto [head, vectors, tail] = row_parts<T>(row, n);
  for (int64_t i = rank; i < head; i += size) fn(i, Elem<T>::load(row[i]));
  for (int64_t v = rank; v < vectors; v += size) {
    float f[W];
    unpack<T>(*reinterpret_cast<const uint4*>(row + head + v * W), f);
#pragma unroll
    for (int k = 0; k < W; ++k) fn(head + v * W + k, f[k]);
  }
  for (int64_t i = tail + rank; i < n; i += size) fn(i, Elem<T>::load(row[i]));
}

// out[i] = fn(i, in[i]) for the elements of one row a member owns, streamed as stream_row does when `in` and
// `out` sit at the same offset within 16 bytes, element by element otherwise.
template <class T, class Fn>
__device__ void map_row(const Bits<T>* in, Bits<T>* out, int64_t n, int rank, int size, Fn&& fn) {
  constexpr int W = kLanes<T>;
  const int64_t offset = int64_t(reinterpret_cast<uintptr_t>(in) % kVectorBytes);
  if (offset != int64_t(reinterpret_cast<uintptr_t>(out) % kVectorBytes)) {
    for (int64_t i = rank; i < n; i += size) out[i] = Elem<T>::store(fn(i, Elem<T>::load(in[i])));
    return;
  }
  const auto [head, vectors, tail] = row_parts<T>(in, n);
  for (int64_t i = rank; i < head; i += size) out[i] = Elem<T>::store(fn(i, Elem<T>::load(in[i])));
  for (int64_t v = rank; v < vectors; v += size) {
    float f[W];
    const int64_t first = head + v * W;
    unpack<T>(*reinterpret_cast<const uint4*>(in + first), f);
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = fn(first + k, f[k]);
    *reinterpret_cast<uint4*>(out + first) = pack<T>(f);
  }
  for (int64_t i = tail + rank; i < n; i += size) out[i] = Elem<T>::store(fn(i, Elem<T>::load(in[i])));
}

// Host side: whether every pointer given is 16-byte aligned and rows of `cols` elements keep them so, i.e.
// whether chunks of kLanes<T> elements may be used.
template <class T>
bool rows_vectorisable(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols % kLanes<T> != 0) return false;
  for (const void* p : pointers)
    if (p && misalignment(p) != 0) return false;
  return true;
}

// Host side: calls launch.template operator()<Team, V>() with the team for rows of `cols` elements (a warp up to
// kWarpRowMax, else a block) and V = kLanes<T> when `vectorised`, else 1.
template <class T, class Launch>
void with_row_team(int64_t cols, bool vectorised, Launch&& launch) {
  constexpr int W = kLanes<T>;
  if (cols <= kWarpRowMax) {
    if (vectorised) launch.template operator()<WarpTeam, W>();
    else launch.template operator()<WarpTeam, 1>();
  } else {
    if (vectorised) launch.template operator()<BlockTeam, W>();
    else launch.template operator()<BlockTeam, 1>();
  }
}

// Host side: blocks for `teams` teams of Team, at most kMaxRowBlocks (the rest loop).
template <class Team>
unsigned row_blocks(int64_t teams) {
  const int64_t blocks = (teams + Team::kTeamsPerBlock - 1) / Team::kTeamsPerBlock;
  return unsigned(std::min(std::max<int64_t>(blocks, 1), kMaxRowBlocks));
}

}  // namespace alpha::kernels::cuda
