// The batch loader: shifted targets, windows inside shards, deterministic shuffles, exact resume,
// disjoint ranks, epochs of whole accumulation steps.
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "alpha/data/loader.h"
#include "alpha/data/shard.h"
#include "core/file_test_util.h"
#include "support/checks.h"

namespace alpha::data {
namespace {

constexpr int kVocab = 65536;
constexpr int64_t kT = 8;

// Two shards whose token at position i is first + i, so a window is named by its first token and a
// window that crossed from one shard into the other would show the jump between 1000 and 20000.
class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_counting_shard(paths[0], 1000, 161);  // 20 windows of 8 + 1
    write_counting_shard(paths[1], 20000, 100);  // 12 windows (99 / 8)
  }
  static void write_counting_shard(const std::string& path, uint16_t first, size_t n) {
    std::vector<uint16_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = uint16_t(first + i);
    write_shard(path, tokens);
  }
  LoaderOptions options(int64_t batch, uint64_t seed = 1) const {
    return {.batch_size = batch, .seq_len = kT, .vocab_size = kVocab, .seed = seed};
  }
  // The first token of every window in the batch.
  static std::vector<int32_t> window_ids(const Batch& batch) {
    std::vector<int32_t> ids;
    for (int64_t b = 0; b < batch.inputs.size(0); ++b) ids.push_back(batch.inputs.data<int32_t>()[b * kT]);
    return ids;
  }
  static bool same(const Batch& a, const Batch& b) {
    return a.inputs.to_vector<int32_t>() == b.inputs.to_vector<int32_t>() &&
           a.targets.to_vector<int32_t>() == b.targets.to_vector<int32_t>();
  }

  test::TempDir dir;
  std::vector<std::string> paths = {dir.file("a.bin"), dir.file("b.bin")};
};

TEST_F(LoaderTest, TargetsAreInputsShiftedAndWindowsStayInsideAShard) {
  Loader loader(paths, options(4));
  EXPECT_EQ(loader.windows(), 32);
  EXPECT_EQ(loader.batches_per_epoch(), 8);
  for (int step = 0; step < 16; ++step) {
    Batch batch = loader.next();
    ASSERT_EQ(batch.inputs.shape(), (Shape{4, kT}));
    ASSERT_EQ(batch.targets.shape(), (Shape{4, kT}));
    ASSERT_EQ(batch.inputs.dtype(), DType::i32);
    auto in = batch.inputs.to_vector<int32_t>(), tg = batch.targets.to_vector<int32_t>();
    for (int64_t b = 0; b < 4; ++b) {
      int32_t start = in[size_t(b * kT)];
      bool first_shard = start < 20000;
      EXPECT_EQ((start - (first_shard ? 1000 : 20000)) % kT, 0) << "window not on a multiple of T";
      for (int64_t t = 0; t < kT; ++t) {
        EXPECT_EQ(in[size_t(b * kT + t)], start + t);
        EXPECT_EQ(tg[size_t(b * kT + t)], start + t + 1);
      }
      EXPECT_LE(start + kT, first_shard ? 1000 + 160 : 20000 + 99) << "window runs past its shard";
    }
  }
}

TEST_F(LoaderTest, EachEpochVisitsEveryWindowOnceInANewOrder) {
  Loader loader(paths, options(4));
  std::vector<int32_t> epochs[2];
  for (auto& epoch : epochs) {
    for (int64_t step = 0; step < loader.batches_per_epoch(); ++step) {
      auto ids = window_ids(loader.next());
      epoch.insert(epoch.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(std::set<int32_t>(epoch.begin(), epoch.end()).size(), 32u);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_EQ(loader.position(), (LoaderPosition{1, 8}));
}

TEST_F(LoaderTest, SameSeedSameBatchesOtherSeedOtherBatches) {
  Loader a(paths, options(4, 7)), b(paths, options(4, 7)), c(paths, options(4, 8));
  bool any_differs = false;
  for (int step = 0; step < 20; ++step) {
    Batch from_a = a.next(), from_b = b.next(), from_c = c.next();
    EXPECT_TRUE(same(from_a, from_b)) << "step " << step;
    any_differs = any_differs || !same(from_a, from_c);
  }
  EXPECT_TRUE(any_differs);
}

TEST_F(LoaderTest, WithoutShuffleWindowsComeInFileOrder) {
  auto opts = options(4);
  opts.shuffle = false;
  Loader loader(paths, opts);
  EXPECT_EQ(window_ids(loader.next()), (std::vector<int32_t>{1000, 1008, 1016, 1024}));
  for (int i = 0; i < 4; ++i) loader.next();
  EXPECT_EQ(window_ids(loader.next()), (std::vector<int32_t>{20000, 20008, 20016, 20024}));
}

TEST_F(LoaderTest, ResumesExactlyFromASavedPosition) {
  Loader straight(paths, options(3));  // 10 batches per epoch, so the run crosses epochs
  std::vector<Batch> batches;
  std::vector<LoaderPosition> positions;
  for (int step = 0; step < 25; ++step) {
    positions.push_back(straight.position());
    batches.push_back(straight.next());
  }
  for (int resume_at : {0, 4, 10, 13, 24}) {
    nlohmann::json saved = positions[size_t(resume_at)];
    Loader resumed(paths, options(3));
    resumed.seek(saved.get<LoaderPosition>());
    for (int step = resume_at; step < 25; ++step)
      EXPECT_TRUE(same(resumed.next(), batches[size_t(step)])) << "resumed at " << resume_at << ", step " << step;
  }
  // The end of an epoch is a valid position too: the next batch opens the following epoch.
  Loader at_end(paths, options(3));
  at_end.seek({0, 10});
  EXPECT_TRUE(same(at_end.next(), batches[10]));
}

TEST_F(LoaderTest, RanksTakeDisjointWindows) {
  constexpr int kWorld = 3;
  std::multiset<int32_t> seen;
  for (int rank = 0; rank < kWorld; ++rank) {
    auto opts = options(2);
    opts.rank = rank;
    opts.world_size = kWorld;
    Loader loader(paths, opts);
    EXPECT_EQ(loader.batches_per_epoch(), 5);  // 32 windows / (2 * 3)
    for (int64_t step = 0; step < loader.batches_per_epoch(); ++step)
      for (int32_t id : window_ids(loader.next())) seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 30u);
  EXPECT_EQ(std::set<int32_t>(seen.begin(), seen.end()).size(), 30u) << "a window went to two ranks";
}

// One rank accumulating two batches of B per step sees, step by step and across epochs, the windows of two
// ranks of B: an epoch holds whole steps (32 windows: 2 steps of 12; the last 8 windows, which would make a
// fifth batch of 6 for one rank alone, are left out by both).
TEST_F(LoaderTest, AccumulatedMicroBatchesSeeTheWindowsOfRanksAcrossEpochs) {
  auto single = options(6);
  single.micro_steps = 2;
  Loader one(paths, single);
  EXPECT_EQ(one.batches_per_epoch(), 4);
  std::vector<Loader> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    auto opts = options(6);
    opts.rank = rank;
    opts.world_size = 2;
    ranks.emplace_back(paths, opts);
  }
  EXPECT_EQ(ranks[0].batches_per_epoch(), 2);
  for (int64_t step = 0; step < 5; ++step)  // into the third epoch
    for (int rank = 0; rank < 2; ++rank)
      ASSERT_TRUE(same(one.next(), ranks[size_t(rank)].next())) << "step " << step << ", rank " << rank;
  single.batch_size = 4;
  single.micro_steps = 9;
  EXPECT_ALPHA_ERROR(Loader(paths, single), ConfigError, "batch_size * world_size * micro_steps = 36");
  single.micro_steps = 0;
  EXPECT_ALPHA_ERROR(Loader(paths, single), ConfigError, "micro_steps", "at least 1");
}

TEST_F(LoaderTest, PositionJsonRoundTripAndRejects) {
  nlohmann::json j = LoaderPosition{3, 5};
  EXPECT_EQ(j, nlohmann::json::parse(R"({"epoch": 3, "index": 5})"));
  EXPECT_EQ(j.get<LoaderPosition>(), (LoaderPosition{3, 5}));
  EXPECT_ALPHA_ERROR(nlohmann::json::parse(R"({"epoch": 3})").get<LoaderPosition>(), ConfigError, "LoaderPosition");
  EXPECT_ALPHA_ERROR(nlohmann::json::parse(R"({"epoch": "x", "index": 1})").get<LoaderPosition>(), ConfigError,
                     "epoch");
}

TEST_F(LoaderTest, RejectsBadOptionsPositionsAndData) {
  auto opts = options(4);
  opts.rank = 2;
  opts.world_size = 2;
  EXPECT_ALPHA_ERROR(Loader(paths, opts), ConfigError, "Loader", "rank", "got 2");
  EXPECT_ALPHA_ERROR(Loader(paths, options(0)), ConfigError, "batch_size");
  EXPECT_ALPHA_ERROR(Loader({}, options(4)), ConfigError, "shard_paths");
  EXPECT_ALPHA_ERROR(Loader(paths, options(33)), ConfigError, "shard_paths", "33 windows", "32 windows");
  Loader loader(paths, options(4));
  EXPECT_ALPHA_ERROR(loader.seek({0, 9}), ConfigError, "position.index", "[0, 8]", "got 9");
  EXPECT_ALPHA_ERROR(loader.seek({-1, 0}), ConfigError, "position.epoch");
  opts = options(4);
  opts.vocab_size = 20050;  // the second shard's ids reach 20099
  EXPECT_ALPHA_ERROR(Loader(paths, opts), IOError, "b.bin", "at byte offset 1124:", "token id 20050");
}

}  // namespace
}  // namespace alpha::data
