// The TCP rendezvous on loopback, one thread per rank: the unique-id hand-over, timeouts that name what
// they waited for, and how a failed rank is found (closed connection, never connected, behind).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "alpha/core/error.h"
#include "alpha/distributed/local_launcher.h"
#include "alpha/distributed/tcp_store.h"

namespace alpha::distributed {
namespace {

using std::chrono::milliseconds;

LaunchEnv env_of(int rank, int world_size, int port) {
  LaunchEnv env;
  env.rank = rank;
  env.world_size = world_size;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  return env;
}

TEST(TcpStore, RankZeroHandsItsValueToEveryRank) {
  constexpr int kWorld = 4;
  TcpStore rank0(env_of(0, kWorld, 0), milliseconds(5000));
  ASSERT_GT(rank0.port(), 0);
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = char(i * 7);  // binary, with zero bytes
  std::vector<std::string> got(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 1; r < kWorld; ++r)
    ranks.emplace_back(
        [&, r] { got[size_t(r)] = TcpStore(env_of(r, kWorld, rank0.port()), milliseconds(5000)).get("id"); });
  std::this_thread::sleep_for(milliseconds(50));  // the others are waiting before the value exists
  rank0.set("id", id);
  for (auto& t : ranks) t.join();
  for (int r = 1; r < kWorld; ++r) EXPECT_EQ(got[size_t(r)], id) << "rank " << r;
  EXPECT_EQ(rank0.get("id"), id);
}

TEST(TcpStore, GetOfAKeyNobodySetsTimesOutNamingIt) {
  TcpStore rank0(env_of(0, 2, 0), milliseconds(200));
  auto start = std::chrono::steady_clock::now();
  try {
    rank0.get("nccl_unique_id");
    FAIL() << "no error";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("'nccl_unique_id'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("200 ms"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
}

TEST(TcpStore, ConnectingWithoutRankZeroFailsWithinTheTimeoutNamingTheAddress) {
  int port = free_local_port();
  try {
    TcpStore(env_of(1, 2, port), milliseconds(300));
    FAIL() << "no error";
  } catch (const IOError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("rank 1 connecting to rank 0 at 127.0.0.1:" + std::to_string(port)), std::string::npos)
        << message;
  }
}

// Polls `done` for up to two seconds (the server notices a closed connection asynchronously).
template <class Done>
bool eventually(Done done) {
  for (int i = 0; i < 200 && !done(); ++i) std::this_thread::sleep_for(milliseconds(10));
  return done();
}

TEST(TcpStore, ARankWhoseProcessEndedIsNamed) {
  TcpStore rank0(env_of(0, 3, 0), milliseconds(2000));
  TcpStore rank1(env_of(1, 3, rank0.port()), milliseconds(2000));
  EXPECT_EQ(rank1.failed_rank().rank, 2) << "rank 2 never connected";
  auto rank2 = std::make_unique<TcpStore>(env_of(2, 3, rank0.port()), milliseconds(2000));
  EXPECT_EQ(rank1.failed_rank().rank, -1) << "all alive, no progress posted";
  rank2.reset();  // its connection closes, as when its process dies
  ASSERT_TRUE(eventually([&] { return !rank1.statuses()[2].connected; }));
  FailedRank failed = rank1.failed_rank();
  EXPECT_EQ(failed.rank, 2);
  EXPECT_NE(failed.why.find("process ended"), std::string::npos) << failed.why;
}

TEST(TcpStore, AHungRankIsTheOneBehind) {
  TcpStore rank0(env_of(0, 3, 0), milliseconds(2000));
  TcpStore rank1(env_of(1, 3, rank0.port()), milliseconds(2000));
  TcpStore rank2(env_of(2, 3, rank0.port()), milliseconds(2000));
  rank0.post_progress(7);
  rank1.post_progress(6);
  rank2.post_progress(7);
  // Posts get no reply: the server may read them after another connection's status request.
  ASSERT_TRUE(eventually([&] { return rank2.failed_rank().rank == 1; }));
  FailedRank failed = rank2.failed_rank();
  EXPECT_NE(failed.why.find("step 6"), std::string::npos) << failed.why;
}

TEST(TcpStore, WhenRankZeroIsGoneItIsTheOneNamed) {
  auto rank0 = std::make_unique<TcpStore>(env_of(0, 2, 0), milliseconds(500));
  TcpStore rank1(env_of(1, 2, rank0->port()), milliseconds(500));
  rank0.reset();
  FailedRank failed = rank1.failed_rank();
  EXPECT_EQ(failed.rank, 0);
  // The first post after the server closed may still reach the socket's buffer; a later one fails.
  EXPECT_TRUE(eventually([&] {
    try {
      rank1.post_progress(1);
      return false;
    } catch (const IOError&) {
      return true;
    }
  }));
}

TEST(FindFailedRank, PrefersADeadRankThenAMissingOneThenTheOneBehind) {
  RankStatus alive{true, true, 3};
  EXPECT_EQ(find_failed_rank({alive, alive, alive}, 0).rank, -1);
  EXPECT_EQ(find_failed_rank({alive, {false, true, 3}, {false, false, -1}}, 0).rank, 1);
  EXPECT_EQ(find_failed_rank({alive, alive, {false, false, -1}}, 0).rank, 2);
  EXPECT_EQ(find_failed_rank({alive, {true, true, 2}, alive}, 0).rank, 1);
  EXPECT_EQ(find_failed_rank({{true, true, 1}, alive}, 0).rank, 0) << "self can be the one behind";
}

}  // namespace
}  // namespace alpha::distributed
