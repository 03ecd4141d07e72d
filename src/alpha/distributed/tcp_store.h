// The rendezvous of a multi-process job, over TCP: rank 0 serves a small key-value store on
// MASTER_ADDR:MASTER_PORT and every rank, rank 0 included, connects to it (retrying until the timeout, as
// the ranks start in any order). It carries the NCCL unique id from rank 0 to the others, and it is how a
// failure gets a rank's name: the server sees a rank's connection close when its process dies, and each
// rank posts its progress (the step it reached), so a hung rank shows as the one behind.
//
// Wire format, one request per message: u8 op, u32 key length, key, u32 value length, value (lengths in
// little-endian); every request but a progress post gets one reply: u32 length, bytes. A get is answered
// when the key is set.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "alpha/distributed/launch_env.h"

namespace alpha::distributed {

struct RankStatus {
  bool connected = false;       // its connection is open now
  bool ever_connected = false;  // it reached the rendezvous at some point
  int64_t progress = -1;        // the last value it posted (-1: none)
};

// Which rank to blame for a collective that failed on rank `self`, from the ranks' statuses: a rank whose
// connection closed (its process ended), else one that never connected, else the one furthest behind;
// -1 when every rank is alive and at the same point. `why` says which of these it was.
struct FailedRank {
  int rank = -1;
  std::string why;
};
FailedRank find_failed_rank(const std::vector<RankStatus>& statuses, int self);

class TcpStore {
 public:
  // Rank 0 binds MASTER_ADDR:MASTER_PORT (port 0: any free port, see port()) and serves; every rank then
  // connects and says its rank. IOError naming the address when the server cannot bind, or when no
  // connection succeeds within `timeout`.
  TcpStore(const LaunchEnv& env, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  int port() const { return port_; }  // the port the store is reached on (rank 0's choice when 0 was asked)

  void set(const std::string& key, const std::string& value);
  // Waits until some rank has set `key`; IOError naming the key after the timeout.
  std::string get(const std::string& key);
  // Sends without waiting for the server: IOError only when the connection is known to be gone (a post
  // may succeed after rank 0 ended; a later one fails).
  void post_progress(int64_t progress);
  // Every rank's status as the server sees it. IOError when the server (rank 0) is unreachable.
  std::vector<RankStatus> statuses();
  // find_failed_rank over statuses(); when the server itself is gone, rank 0 is the one that failed.
  FailedRank failed_rank();

 private:
  class Server;
  std::string request(uint8_t op, const std::string& key, const std::string& value);

  LaunchEnv env_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;  // rank 0 only
  int port_ = 0;
  int socket_ = -1;
  bool broken_ = false;  // a request timed out or the connection failed: later replies would be out of order
};

}  // namespace alpha::distributed
