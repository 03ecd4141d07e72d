// Hopper's bulk tensor copies (TMA) and the shared-memory barriers they complete on, for warp-specialised
// kernels: one producer thread moves whole tiles from global to shared memory with cp.async.bulk.tensor,
// described by a tensor map built on the host (head_tensor_map, tma.cu), and the consumer warps wait on an
// mbarrier whose transaction count the copy engine pays off as the bytes land. The consumers hand a stage back by
// arriving on a second barrier, which the producer waits on before refilling it.
//
// Why: with cp.async every consumer thread computes addresses and issues copies, and the block meets at
// __syncthreads for every tile; with TMA the consumer warps issue only tensor-core and softmax work, the
// producer runs ahead by the ring's depth, and zero fill past the tensor's end comes for free (the tails).
//
// Phases: an mbarrier completes phase 0, 1, 0, ... Waiting with parity p returns once the phase of parity p
// has completed; on a fresh barrier, parity 1 counts as completed (so a producer's first pass over the ring
// waits on nothing).
#pragma once
#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "alpha/kernels/attention_reference.h"
#include "alpha/kernels/cuda/mma.cuh"

namespace alpha::kernels::cuda::tma {

// The tensor map of one attention operand [B, T, H, features] (strided; unit stride along the features):
// rank 4, innermost first, boxes of 64 features × 1 head × box_rows rows × 1, 128-byte swizzled (wgmma's
// layout, wgmma.cuh), zeros past every end. LayoutError naming `op` and the operand `name` when the driver
// refuses the layout.
CUtensorMap head_tensor_map(const void* x, bool bf16, size_t element_bytes, const AttentionStrides& strides,
                            int64_t batch, int64_t time, int64_t heads, int64_t features, int box_rows, const char* op,
                            const char* name);
template <class T>
CUtensorMap head_tensor_map(const T* x, const AttentionStrides& strides, int64_t batch, int64_t time, int64_t heads,
                            int64_t features, int box_rows, const char* op, const char* name) {
  return head_tensor_map(x, std::is_same_v<T, bf16>, sizeof(T), strides, batch, time, heads, features, box_rows, op,
                         name);
}
// The tensor map of an f32 accumulator [heads, time, features] (contiguous) that blocks add tiles into
// (reduce_add_box): rank 3, innermost first, boxes of 32 features (128 bytes) × box_rows rows × 1 head,
// 128-byte swizzled (AccumulatorTile's layout), writes past every end dropped. LayoutError naming `op` and
// `name` when the driver refuses it (features must be a multiple of 4: rows 16-byte aligned).
CUtensorMap accumulator_tensor_map(float* x, int64_t heads, int64_t time, int64_t features, int box_rows,
                                   const char* op, const char* name);

// Initialises a barrier that completes a phase after `arrivals` arrivals (and their transaction bytes).
__device__ __forceinline__ void barrier_init(uint64_t* barrier, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mma::shared_address(barrier)), "r"(arrivals)
               : "memory");
}
// Makes the initialised barriers visible to the copy engine (the async proxy); a __syncthreads after it
// publishes them to the block.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` of transactions (the copies about to be issued against it).
__device__ __forceinline__ void arrive_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mma::shared_address(barrier)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mma::shared_address(barrier)) : "memory");
}
// Waits until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}\n" ::"r"(mma::shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// Copies the box at coordinates (c0, c1, c2, c3) (innermost first) of a rank-4 tensor map into shared
// memory at `destination`, paying `barrier`'s transaction count as it lands. `map` is the address of a
// __grid_constant__ kernel parameter.
__device__ __forceinline__ void load_box(void* destination, const void* map, uint64_t* barrier, int c0, int c1, int c2,
                                         int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(mma::shared_address(destination)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(mma::shared_address(barrier))
      : "memory");
}
// Adds the f32 box at shared memory `source` into the box at coordinates (c0, c1, c2) of a rank-3 tensor
// map (accumulator_tensor_map), element by element in L2 (atomically per element; the order of two blocks'
// additions is not fixed). One thread issues it, after the threads that wrote `source` passed
// fence_async_proxy and a barrier; it joins the thread's current bulk group (bulk_commit).
__device__ __forceinline__ void reduce_add_box(const void* map, const void* source, int c0, int c1, int c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(c2), "r"(mma::shared_address(source))
      : "memory");
}
// Closes this thread's bulk operations issued since the last commit into one group.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's bulk groups still read their shared memory (the source may
// then be rewritten).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Waits until every bulk group of this thread has completed, its writes included (before the block exits).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// A barrier among kThreads threads of the block (whole warps) on hardware barrier kId (1-15; 0 is
// __syncthreads'): lets one warpgroup meet without stopping the others. The id is an immediate: with an id in
// a register ptxas reserves all 16 of the block's barriers.
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier() {
  static_assert(kId >= 1 && kId < 16, "barrier 0 is __syncthreads'");
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

// Arrives at hardware barrier kId (counted among kThreads, as named_barrier) without waiting for it to complete:
// the other side of a handshake waits there with named_barrier.
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_arrive() {
  static_assert(kId >= 1 && kId < 16, "barrier 0 is __syncthreads'");
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

// Fetches a tensor map into the descriptor cache ahead of its first copy.
__device__ __forceinline__ void prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Copies rows [first_row, first_row + rows) of one head of a head_tensor_map operand into `tile` (a
// wgmma::SwizzledTile: one box per 64-feature block), paying off `full`'s transaction count; the caller
// announces the bytes (arrive_expect_bytes, Tile::kBytes per tile) before the copies.
template <class Tile>
__device__ __forceinline__ void load_tile(Tile tile, const CUtensorMap& map, uint64_t* full, int64_t first_row,
                                          int64_t head, int64_t b) {
  static_assert(Tile::kTileRows <= 256, "a tensor map's box spans at most 256 rows");
#pragma unroll
  for (int block = 0; block < Tile::kBytes / Tile::kBlockBytes; ++block)
    load_box(tile.data + block * Tile::kBlockBytes / 2, &map, full, 64 * block, int(head), int(first_row), int(b));
}

// A shared tile of kRows × kCols f32 in the layout an accumulator_tensor_map box of kRows rows takes: one
// box per 32 columns (128-byte rows back to back), the 16-byte chunk c of row r at chunk position c ^ (r % 8)
// (the 128-byte swizzle, as SwizzledTile's, so a warp's stores of C fragments spread over the banks). Starts
// 1024-byte aligned.
template <int kRows, int kCols>
struct AccumulatorTile {
  static_assert(kCols % 32 == 0 && kRows % 8 == 0, "whole 32-column boxes of whole 8-row swizzle periods");
  static constexpr int kBoxBytes = kRows * 128, kBoxes = kCols / 32, kBytes = kBoxBytes * kBoxes;
  float* data;
  __device__ AccumulatorTile next(int index) const { return {data + index * kBytes / 4}; }
  __device__ float* box(int b) const { return data + b * kBoxBytes / 4; }
  // Columns col and col + 1 (col even) of row r.
  __device__ float2* pair(int r, int col) const {
    const int offset = col / 32 * kBoxBytes + r * 128 + ((col % 32 / 4) ^ (r % 8)) * 16 + col % 4 * 4;
    return reinterpret_cast<float2*>(reinterpret_cast<char*>(data) + offset);
  }
};

// The stage of a ring of kStages that tile n (counting from 0) fills, and the parity of that fill's phase:
// consumers wait for it on the stage's full barrier; the producer waits on the stage's empty barrier with
// the other parity (the fill before, handed back).
struct RingSlot {
  int stage;
  uint32_t parity;
};
template <int kStages>
__device__ __forceinline__ RingSlot ring_slot(int n) {
  return {n % kStages, uint32_t((n / kStages) & 1)};
}
// A tile count with the same stage and parity as n, below 2·kStages: what a block that runs many tiles through one
// ring keeps between its units of work, so that the count never overflows.
template <int kStages>
__device__ __forceinline__ int ring_count_wrapped(int n) {
  return n % (2 * kStages);
}

// A consumer warp's hand-back of a stage it no longer reads (after its own wgmma wait): one arrival per
// warp, so empty barriers count the consumer warps. For stages the copy engine refills. A stage that threads
// refill with plain stores (the dK/dV kernel's statistics rows) takes every consumer lane's arrive instead:
// compute-sanitizer's racecheck reported the one-lane hand-back there (docs/SECURITY.md).
__device__ __forceinline__ void hand_back(uint64_t* empty, int lane) {
  __syncwarp();
  if (lane == 0) arrive(empty);
}

// The key/value ring of an attention block: kStages stages of a K tile and a V tile, each with a full
// barrier (the copy engine completes it) and an empty one (the consumer warps complete it), K and V apart so
// that one can be refilled while the other is still read. Laid over 4·kStages barriers in shared memory.
template <int kStages>
struct KeyValueRing {
  uint64_t *k_full, *k_empty, *v_full, *v_empty;
  __device__ explicit KeyValueRing(uint64_t* barriers)
      : k_full(barriers), k_empty(barriers + kStages), v_full(barriers + 2 * kStages), v_empty(barriers + 3 * kStages) {}
  // One thread, before the block's barrier that publishes the barriers (fence_barrier_init, __syncthreads).
  __device__ void init(int consumer_warps) const {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      barrier_init(k_full + s, 1);
      barrier_init(v_full + s, 1);
      barrier_init(k_empty + s, consumer_warps);
      barrier_init(v_empty + s, consumer_warps);
    }
  }
  // The producer thread: the tiles of keys [j0, j0 + rows) for j0 = key_begin, key_begin + rows, ... below
  // key_end, tile n into stage n % kStages once the consumers handed back that stage's previous fill; n counts
  // on from `first` (a block that runs several query tiles goes on through the ring), the next tile's n returned.
  template <class Tile>
  __device__ int produce(Tile k_tiles, Tile v_tiles, const CUtensorMap& k_map, const CUtensorMap& v_map,
                         int64_t key_begin, int64_t key_end, int64_t head, int64_t b, int first = 0) const {
    int n = first;
    for (int64_t j0 = key_begin; j0 < key_end; j0 += Tile::kTileRows, ++n) {
      const auto [stage, parity] = ring_slot<kStages>(n);
      wait(k_empty + stage, parity ^ 1);
      arrive_expect_bytes(k_full + stage, Tile::kBytes);
      load_tile(k_tiles.next(stage), k_map, k_full + stage, j0, head, b);
      wait(v_empty + stage, parity ^ 1);
      arrive_expect_bytes(v_full + stage, Tile::kBytes);
      load_tile(v_tiles.next(stage), v_map, v_full + stage, j0, head, b);
    }
    return n;
  }
};

// A warp-specialised block: warpgroup 0 the producer, warpgroups 1..kConsumers the consumers, with the
// registers per thread each keeps (setmaxnreg) at kMinBlocks blocks per SM. setmaxnreg moves registers within
// a block only: the new counts must fit what the block got at launch, the register file's share per thread
// at kMinBlocks blocks (rounded down to 8), or setmaxnreg.inc waits for ever.
template <int kConsumerWarpgroups, int kConsumerRegs, int kProducerRegs, int kBlocksPerSm>
struct WarpSpecialised {
  static constexpr int kConsumers = kConsumerWarpgroups, kConsumerRegisters = kConsumerRegs,
                       kProducerRegisters = kProducerRegs, kMinBlocks = kBlocksPerSm;
  static constexpr int kThreads = 128 * (kConsumers + 1), kConsumerThreads = 128 * kConsumers;
  static constexpr int kLaunchRegisters = 65536 / (kThreads * kBlocksPerSm) / 8 * 8;
  static_assert(kConsumerRegs * kConsumers + kProducerRegs <= kLaunchRegisters * (kConsumers + 1),
                "the warpgroups' registers fit the block's allocation at launch");
};

// Moves registers between the warpgroups of a warp-specialised block (sm_90a): the producer gives up what it
// does not need, the consumers take it. Every warp of the warpgroup executes it.
template <int kRegisters>
__device__ __forceinline__ void shrink_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void grow_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace alpha::kernels::cuda::tma
