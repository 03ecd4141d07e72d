// The model of persistent attention launches' fixed shares (kernels/persistent_tiles.h) against loads worked out by
// hand and by a separate Python model of the same schedule (docs/PERFORMANCE.md, thirty-fourth session), and the
// choice between taking tiles head by head or tile by tile on the shapes that choice was timed on (an H200, 132 SMs).
#include <gtest/gtest.h>

#include "alpha/kernels/persistent_tiles.h"

namespace alpha {
namespace {

using kernels::most_loaded_block;
using kernels::tiles_balance_better_by_tile;

constexpr int kRows = 128, kKeys = 128;

kernels::AttentionParams<float> shape(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len, bool causal) {
  kernels::AttentionParams<float> p{};
  p.batch = batch;
  p.q_heads = p.kv_heads = heads;
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.head_dim = p.value_dim = 128;
  p.causal = causal;
  return p;
}

TEST(PersistentTiles, TwoCausalTilesCostTheirKeyTilesPlusOne) {
  // Tile 1 (rows 128-255) sees two key tiles and costs 3, tile 0 costs 2: one block carries both, two blocks split
  // them, whichever the order.
  const auto p = shape(1, 1, 256, 256, true);
  for (const bool by_tile : {false, true}) {
    EXPECT_EQ(most_loaded_block(p, kRows, kKeys, 1, by_tile), 5);
    EXPECT_EQ(most_loaded_block(p, kRows, kKeys, 2, by_tile), 3);
  }
}

TEST(PersistentTiles, FewTilesABlockBalanceBetterTileByTile) {
  // B 1, H 16, T 1280: 160 tiles on 132 blocks. Head by head, block 110 takes head 11's last tile (cost 11) in the
  // first round and head 15's seventh (8) in the second; tile by tile, the longest go first and the second round's
  // short ones to the blocks whose first were shortest.
  const auto p = shape(1, 16, 1280, 1280, true);
  EXPECT_EQ(most_loaded_block(p, kRows, kKeys, 132, false), 19);
  EXPECT_EQ(most_loaded_block(p, kRows, kKeys, 132, true), 11);
  EXPECT_TRUE(tiles_balance_better_by_tile(p, kRows, kKeys, 132));
  EXPECT_TRUE(tiles_balance_better_by_tile(shape(1, 12, 2048, 2048, true), kRows, kKeys, 132));  // 27 against 17
  EXPECT_TRUE(tiles_balance_better_by_tile(shape(2, 12, 2048, 2048, true), kRows, kKeys, 132));  // 36 against 30
  EXPECT_TRUE(tiles_balance_better_by_tile(shape(1, 48, 4096, 4096, true), kRows, kKeys, 132));  // 242 against 204
}

TEST(PersistentTiles, BalancedShapesStayHeadByHead) {
  // Many rounds (the bench's shapes), tiles of one cost (no mask; causal with Tq < Tk here), or a small difference.
  EXPECT_EQ(most_loaded_block(shape(32, 16, 512, 512, true), kRows, kKeys, 132, false), 56);
  EXPECT_EQ(most_loaded_block(shape(32, 16, 512, 512, true), kRows, kKeys, 132, true), 56);
  EXPECT_FALSE(tiles_balance_better_by_tile(shape(32, 16, 512, 512, true), kRows, kKeys, 132));
  EXPECT_FALSE(tiles_balance_better_by_tile(shape(4, 16, 4096, 4096, true), kRows, kKeys, 132));  // 280 against 272
  EXPECT_FALSE(tiles_balance_better_by_tile(shape(1, 16, 1280, 1280, false), kRows, kKeys, 132));
  EXPECT_FALSE(tiles_balance_better_by_tile(shape(8, 10, 130, 300, true), kRows, kKeys, 132));
}

}  // namespace
}  // namespace alpha
