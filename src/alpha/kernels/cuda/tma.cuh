// Hopper's bulk tensor copies (TMA) and the shared-memory barriers they complete on, for warp-specialised
// kernels: one producer thread moves whole tiles from global to shared memory with cp.async.bulk.tensor,
// described by a tensor map built on the host (flash_attention_tma_forward.cu), and the consumer warps wait on an mbarrier
// whose transaction count the copy engine pays off as the bytes land. The consumers hand a stage back by
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
#include <cstdint>

#include "alpha/kernels/cuda/mma.cuh"

namespace alpha::kernels::cuda::tma {

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
// Fetches a tensor map into the descriptor cache ahead of its first copy.
__device__ __forceinline__ void prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

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

// A barrier among `threads` threads only (hardware barrier `id`, 1..15; 0 is __syncthreads'): sync waits,
// arrive signals without waiting.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace alpha::kernels::cuda::tma
