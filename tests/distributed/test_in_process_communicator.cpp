// The test communicator itself: each collective's result on every rank, in f32, bf16 and f16, its gather buffer
// gathered in place, and a rank that stops participating makes the others fail within the timeout, naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "alpha/core/half.h"
#include "distributed/in_process_communicator.h"
#include "support/checks.h"

namespace alpha::distributed::test {
namespace {

using std::chrono::milliseconds;

// fn(comm, rank) on each of `world` ranks of one group (a thread each), the group's timeout 5 s.
void on_each_rank(int world, const std::function<void(InProcessCommunicator& comm, int rank)>& fn) {
  auto group = std::make_shared<InProcessGroup>(world, milliseconds(5000));
  run_ranks(world, [&](int rank) {
    InProcessCommunicator comm(group, rank);
    fn(comm, rank);
  });
}

TEST(InProcessCommunicator, AllReduceSumsAndAveragesInRankOrder) {
  constexpr int kWorld = 3;
  std::vector<std::vector<float>> sums(kWorld), averages(kWorld);
  on_each_rank(kWorld, [&](InProcessCommunicator& comm, int rank) {
    std::vector<float> data{float(rank), float(rank * 10), 1.0f};
    comm.all_reduce(data.data(), data.size(), DType::f32, ReduceOp::sum);
    sums[size_t(rank)] = data;
    data = {float(rank), 3.0f};
    comm.all_reduce(data.data(), data.size(), DType::f32, ReduceOp::average);
    averages[size_t(rank)] = data;
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(sums[size_t(r)], (std::vector<float>{3.0f, 30.0f, 3.0f}));
    EXPECT_EQ(averages[size_t(r)], (std::vector<float>{1.0f, 3.0f}));
  }
}

// Several buffers, of several sizes and dtypes, each reduced over the ranks' buffers of its index, as one
// collective; a dtype no collective adds is refused.
TEST(InProcessCommunicator, AllReduceManyReducesEachBufferAsOneCollective) {
  constexpr int kWorld = 3;
  on_each_rank(kWorld, [&](InProcessCommunicator& comm, int rank) {
    std::vector<float> first{float(rank), 1.0f, float(-rank)};
    std::vector<double> second{0.5 * rank, 7.0};
    comm.all_reduce_many({{first.data(), first.size(), DType::f32}, {second.data(), second.size(), DType::f64}},
                         ReduceOp::sum);
    EXPECT_EQ(comm.collectives(), 1);
    EXPECT_EQ(first, (std::vector<float>{3.0f, 3.0f, -3.0f}));
    EXPECT_EQ(second, (std::vector<double>{1.5, 21.0}));
    comm.all_reduce_many({{first.data(), 1, DType::f32}}, ReduceOp::average);
    EXPECT_EQ(first[0], 3.0f);
    std::vector<int32_t> ids{rank};
    EXPECT_ALPHA_ERROR(comm.all_reduce_many({{ids.data(), 1, DType::i32}}, ReduceOp::sum), DTypeError,
                       "[all_reduce_many]", "i32");
  });
}

// reduce: the root's recv gets the reduction (in place or not), the others' recv stays as it was; reduce_many runs
// each part to its own root.
TEST(InProcessCommunicator, ReduceWritesTheRootsBufferOnly) {
  constexpr int kWorld = 3;
  std::vector<std::vector<float>> in_place(kWorld), apart(kWorld);
  on_each_rank(kWorld, [&](InProcessCommunicator& comm, int rank) {
    std::vector<float>& mine = in_place[size_t(rank)];
    mine = {float(rank + 1), 10.0f * float(rank + 1), float(rank) - 1.0f};
    std::vector<float> send{float(rank), 2.0f}, recv{-7.0f, -7.0f};
    comm.reduce_many({{mine.data(), mine.data(), 2, 1}, {send.data(), recv.data(), 2, 2}}, DType::f32, ReduceOp::sum);
    comm.reduce(mine.data() + 2, mine.data() + 2, 1, DType::f32, ReduceOp::average, 0);
    apart[size_t(rank)] = recv;
    std::vector<int32_t> ids{rank};
    EXPECT_ALPHA_ERROR(comm.reduce(ids.data(), ids.data(), 1, DType::i32, ReduceOp::sum, 0), DTypeError, "[reduce]",
                       "i32");
  });
  EXPECT_EQ(in_place[0], (std::vector<float>{1.0f, 10.0f, 0.0f}));
  EXPECT_EQ(in_place[1], (std::vector<float>{6.0f, 60.0f, 0.0f}));
  EXPECT_EQ(in_place[2], (std::vector<float>{3.0f, 30.0f, 1.0f}));
  EXPECT_EQ(apart[0], (std::vector<float>{-7.0f, -7.0f}));
  EXPECT_EQ(apart[1], (std::vector<float>{-7.0f, -7.0f}));
  EXPECT_EQ(apart[2], (std::vector<float>{3.0f, 6.0f}));
}

TEST(InProcessCommunicator, Bf16RoundsTheF32Sum) {
  std::vector<float> got(2);
  on_each_rank(2, [&](InProcessCommunicator& comm, int rank) {
    bf16 value(rank == 0 ? 1.0f : 0.00390625f);  // 1 + 2^-8 is not a bf16: rounds to even, 1
    comm.all_reduce(&value, 1, DType::bf16, ReduceOp::sum);
    got[size_t(rank)] = float(value);
  });
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 1.0f);
}

TEST(InProcessCommunicator, F16RoundsTheF32Average) {
  std::vector<float> got(2);
  on_each_rank(2, [&](InProcessCommunicator& comm, int rank) {
    // (2 + 3·2^-10) / 2 = 1 + 2^-10 + 2^-11, half an f16 step (2^-10) above 1 + 2^-10: to even, 1 + 2^-9 (bf16
    // would give 1).
    f16 value(rank == 0 ? 2.0f : 0.0029296875f);
    comm.all_reduce(&value, 1, DType::f16, ReduceOp::average);
    got[size_t(rank)] = float(value);
  });
  EXPECT_EQ(got[0], 1.0f + 0.001953125f);
  EXPECT_EQ(got[1], got[0]);
}

TEST(InProcessCommunicator, ReduceScatterAllGatherAndBroadcast) {
  constexpr int kWorld = 4;
  on_each_rank(kWorld, [&](InProcessCommunicator& comm, int rank) {
    std::vector<float> send(kWorld * 2);
    for (size_t i = 0; i < send.size(); ++i) send[i] = float(i + 100 * rank);
    std::vector<float> shard(2);
    comm.reduce_scatter(send.data(), shard.data(), 2, DType::f32, ReduceOp::sum);
    // Element i summed over ranks: 4 i + 100 (0 + 1 + 2 + 3).
    EXPECT_EQ(shard, (std::vector<float>{float(4 * (2 * rank) + 600), float(4 * (2 * rank + 1) + 600)}));

    std::vector<float> mine{float(rank), float(-rank)}, all(kWorld * 2);
    comm.all_gather(mine.data(), all.data(), 2, DType::f32);
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(all[size_t(2 * r)], float(r));
      EXPECT_EQ(all[size_t(2 * r + 1)], float(-r));
    }
    std::vector<float> value{float(rank + 1)};
    comm.broadcast(value.data(), 1, DType::f32, 2);
    EXPECT_EQ(value[0], 3.0f);
    EXPECT_EQ(comm.collectives(), 3);

    // A gather buffer (here an ordinary zeroed tensor), gathered in place as the deterministic reduction
    // gathers its rows: this rank's block is row `rank`. Bad sizes and dtypes are refused, naming the argument.
    Tensor rows = comm.gather_buffer(3, DType::f32);
    EXPECT_EQ(rows.device(), comm.device());
    EXPECT_EQ(rows.shape(), (Shape{kWorld, 3}));
    EXPECT_EQ(rows.to_vector<float>(), std::vector<float>(kWorld * 3, 0.0f));
    EXPECT_ALPHA_ERROR(comm.gather_buffer(-1, DType::f32), ValueError, "[Communicator::gather_buffer]", "'block_numel'",
                       "-1");
    EXPECT_ALPHA_ERROR(comm.gather_buffer(3, DType::i32), DTypeError, "[Communicator::gather_buffer]", "i32");
    Tensor block = rows.select(0, rank);
    block.copy_from(Tensor::from_vector(std::vector<float>{float(rank), 7.0f, float(-rank)}, {3}));
    comm.all_gather(block.raw_data(), rows.raw_data(), 3, DType::f32);
    std::vector<float> expected;
    for (int r = 0; r < kWorld; ++r) expected.insert(expected.end(), {float(r), 7.0f, float(-r)});
    EXPECT_EQ(rows.to_vector<float>(), expected);
  });
}

TEST(InProcessCommunicator, AllToAllHandsRankQEveryRanksBlockQInRankOrder) {
  constexpr int kWorld = 3;
  on_each_rank(kWorld, [&](InProcessCommunicator& comm, int rank) {
    // Rank r's block q holds 100 r + 10 q + {0, 1}.
    std::vector<float> send;
    for (int q = 0; q < kWorld; ++q)
      send.insert(send.end(), {float(100 * rank + 10 * q), float(100 * rank + 10 * q + 1)});
    std::vector<float> recv(kWorld * 2, -1.0f), expected;
    comm.all_to_all(send.data(), recv.data(), 2, DType::f32);
    for (int r = 0; r < kWorld; ++r)
      expected.insert(expected.end(), {float(100 * r + 10 * rank), float(100 * r + 10 * rank + 1)});
    EXPECT_EQ(recv, expected);
    // In place: the others read this rank's blocks before it overwrites them.
    comm.all_to_all(send.data(), send.data(), 2, DType::f32);
    EXPECT_EQ(send, expected);
    EXPECT_ALPHA_ERROR(comm.all_to_all(send.data(), recv.data(), 2, DType::i32), DTypeError, "[all_to_all]", "i32");
    int ran = 0;
    comm.queue_in_collective_order([&](Stream stream) {
      EXPECT_EQ(stream.handle, nullptr);
      ++ran;
    });
    EXPECT_EQ(ran, 1);
  });
}

TEST(InProcessCommunicator, ARankThatStopsParticipatingIsNamedWithinTheTimeout) {
  constexpr int kWorld = 3;
  auto group = std::make_shared<InProcessGroup>(kWorld, milliseconds(300));
  std::vector<int> failed(kWorld, -2);
  std::vector<std::string> messages(kWorld);
  auto start = std::chrono::steady_clock::now();
  run_ranks(kWorld, [&](int rank) {
    InProcessCommunicator comm(group, rank);
    float value = 1.0f;
    comm.all_reduce(&value, 1, DType::f32, ReduceOp::sum);
    if (rank == 1) return;  // "dies" after the first collective
    try {
      comm.all_reduce(&value, 1, DType::f32, ReduceOp::sum);
    } catch (const RankFailureError& e) {
      failed[size_t(rank)] = e.failed_rank();
      messages[size_t(rank)] = e.what();
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
  for (int r : {0, 2}) {
    EXPECT_EQ(failed[size_t(r)], 1) << messages[size_t(r)];
    EXPECT_NE(messages[size_t(r)].find("rank 1"), std::string::npos) << messages[size_t(r)];
  }
}

}  // namespace
}  // namespace alpha::distributed::test
