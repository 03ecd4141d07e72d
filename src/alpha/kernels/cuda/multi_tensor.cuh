// Multi-tensor launches (PyTorch's multi_tensor_apply): one kernel launch works on a list of tensors, each
// block on one chunk of one tensor, found in a LaunchTable passed as the launch's parameter. Shared by the
// optimiser's list kernels (optim.cu) and the list copy (copy.cu).
#pragma once
#include <cstdint>
#include <span>

#include "alpha/kernels/multi_tensor.h"

namespace alpha::kernels::cuda {

// The tensors of one multi-tensor launch and which blocks work on which: tensor k owns blocks
// [first_block[k], first_block[k + 1]), block first_block[k] + c working on its chunk c (each kernel
// decides what a chunk is). The table is a kernel parameter (__grid_constant__: read in place from the
// parameter bank), so a launch needs no allocation, copy or synchronisation for it: CUDA 12.1+ takes up to 32764 bytes of
// parameters on sm_70 and later (this build targets sm_90), room for kTensorsPerLaunch tensors of every
// kernel here, where the 4 KB of older toolkits (PyTorch's multi_tensor_apply) hold ~40 AdamW tensors. A
// longer list takes several launches. Prefix offsets rather than an entry per block let a launch have any
// number of blocks, so the chunks can stay the single-tensor sum of squares' (and with them its bits).
template <class Entry>
struct LaunchTable {
  Entry tensors[kTensorsPerLaunch];
  int first_block[kTensorsPerLaunch + 1];
  int count;
};
constexpr size_t kMaxParameterBytes = 32764;
constexpr int64_t kMaxGridBlocks = (int64_t(1) << 31) - 1;  // gridDim.x; also keeps first_block in an int

// This block's tensor (the last k with first_block[k] <= blockIdx.x, by binary search) and its chunk of it.
struct BlockWork {
  int tensor;
  int64_t chunk;
};
template <class Entry>
__device__ BlockWork block_work(const LaunchTable<Entry>& table) {
  const int block = int(blockIdx.x);
  int lo = 0, hi = table.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.first_block[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  return {lo, block - table.first_block[lo]};
}

// Fills launch tables with the tensors in list order, entry(args) giving a tensor's table entry and
// blocks_of(args) its number of blocks (0: nothing to do, left out), and calls launch(table, blocks) for
// each full table and the last one.
template <class Entry, class Args, class MakeEntry, class BlocksOf, class Launch>
void for_each_launch(std::span<const Args> tensors, MakeEntry entry, BlocksOf blocks_of, Launch launch) {
  static_assert(sizeof(LaunchTable<Entry>) <= kMaxParameterBytes, "a launch table fits the kernel parameters");
  LaunchTable<Entry> table{};
  int64_t blocks = 0;
  auto flush = [&] {
    if (table.count == 0) return;
    table.first_block[table.count] = int(blocks);
    launch(table, blocks);
    table.count = 0;
    blocks = 0;
  };
  for (const Args& args : tensors) {
    const int64_t tensor_blocks = blocks_of(args);
    if (tensor_blocks == 0) continue;
    if (table.count == kTensorsPerLaunch || blocks + tensor_blocks > kMaxGridBlocks) flush();
    table.tensors[table.count] = entry(args);
    table.first_block[table.count++] = int(blocks);
    blocks += tensor_blocks;
  }
  flush();
}

}  // namespace alpha::kernels::cuda
