// A model of how a persistent attention launch's fixed shares balance, for choosing the order in which its blocks take
// query tiles (the Hopper forward's PersistentTiles, kernels/cuda/flash_attention_tma_forward.cuh): G blocks take the
// B·Hq·tiles items, block x item r·G + x in even rounds r and r·G + G − 1 − x in odd ones; the items are numbered head
// by head (head·tiles + tile counted from the end) or tile by tile (tile counted from the end · B·Hq + head). A query
// tile costs its key tiles plus one (its Q tile and its rows), a cost that matched which order ran faster on 14 causal
// shapes on an H200 (docs/PERFORMANCE.md, thirty-fourth session). Host code without CUDA, so that CPU tests check it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "alpha/core/hd.h"
#include "alpha/kernels/attention_reference.h"

namespace alpha::kernels {

// Item `item`'s query tile, counted from the end, and head b·Hq + h, head by head or (by_tile) tile by tile: what
// PersistentTiles (in 32 bits) and the model below (in 64) both read an item as.
template <class Index>
struct PersistentItem {
  Index from_end, bh;
};
template <class Index>
ALPHA_HD PersistentItem<Index> persistent_item(Index item, Index tiles, Index heads, bool by_tile) {
  if (by_tile) return {item / heads, item % heads};
  return {item % tiles, item / tiles};
}

// The modelled cost of each query tile of `rows` rows, counted from the end: one for the tile, plus its key tiles of
// `keys` keys that any of its rows sees.
template <class T>
std::vector<int64_t> tile_costs(const AttentionParams<T>& p, int rows, int keys) {
  const int64_t tiles = (p.q_len + rows - 1) / rows;
  std::vector<int64_t> cost(size_t(tiles), 1);
  for (int64_t from_end = 0; from_end < tiles; ++from_end) {
    const KeyRange seen = tile_key_ranges(p, (tiles - 1 - from_end) * rows, rows).any;
    if (seen.end > seen.begin) cost[size_t(from_end)] += (seen.end - seen.begin + keys - 1) / keys;
  }
  return cost;
}

// The cost of the most loaded of `blocks` persistent blocks taking the tiles of `heads` heads (each tile's cost in
// `cost`, tile_costs') head by head or (by_tile) tile by tile.
inline int64_t most_loaded_block(const std::vector<int64_t>& cost, int64_t heads, int64_t blocks, bool by_tile) {
  const int64_t tiles = int64_t(cost.size()), items = tiles * heads;
  int64_t most = 0;
  for (int64_t x = 0; x < blocks; ++x) {
    int64_t load = 0;
    for (int64_t round = 0;; ++round) {
      const int64_t item = round * blocks + (round % 2 == 0 ? x : blocks - 1 - x);
      if (item >= items) break;  // the next rounds' items are larger still
      load += cost[size_t(persistent_item(item, tiles, heads, by_tile).from_end)];
    }
    most = std::max(most, load);
  }
  return most;
}

// The same for query tiles of `rows` rows and key tiles of `keys` keys of the shape `p`.
template <class T>
int64_t most_loaded_block(const AttentionParams<T>& p, int rows, int keys, int64_t blocks, bool by_tile) {
  return most_loaded_block(tile_costs(p, rows, keys), p.batch * p.q_heads, blocks, by_tile);
}

// Whether the tiles are better taken tile by tile: head by head, the blocks running at once share a head's K and V
// and ran 4-19% faster wherever both orders balance, so tile by tile only where head by head's most loaded block
// carries over 1.1× tile by tile's. Past 64 tiles a block, head by head without modelling (the model's cost grows with
// the tiles, and so many rounds balance).
template <class T>
bool tiles_balance_better_by_tile(const AttentionParams<T>& p, int rows, int keys, int64_t blocks) {
  const int64_t heads = p.batch * p.q_heads;
  if ((p.q_len + rows - 1) / rows * heads > 64 * blocks) return false;
  const std::vector<int64_t> cost = tile_costs(p, rows, keys);  // both orders' tiles cost the same
  return 10 * most_loaded_block(cost, heads, blocks, false) > 11 * most_loaded_block(cost, heads, blocks, true);
}

}  // namespace alpha::kernels
