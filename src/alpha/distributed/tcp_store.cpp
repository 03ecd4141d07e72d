#include "alpha/distributed/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "alpha/core/error.h"

namespace alpha::distributed {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kOp = "rendezvous";

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kProgress = 4, kStatus = 5 };

[[noreturn]] void raise_net(const std::string& where, const std::string& what) {
  throw IOError("[" + std::string(kOp) + "] " + where + ": " + what);
}

std::string endpoint(const LaunchEnv& env) { return env.master_addr + ":" + std::to_string(env.master_port); }

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}

std::string frame_request(uint8_t op, const std::string& key, const std::string& value) {
  std::string msg(1, char(op));
  put_u32(msg, uint32_t(key.size()));
  msg += key;
  put_u32(msg, uint32_t(value.size()));
  msg += value;
  return msg;
}
std::string frame_reply(const std::string& value) {
  std::string msg;
  put_u32(msg, uint32_t(value.size()));
  return msg + value;
}

// Sends all of `data`; false when the peer is gone.
bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? int(left) : 0;
}

enum class Received { all, timed_out, closed };

// Reads exactly n bytes before the deadline.
Received recv_exact(int fd, char* out, size_t n, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return Received::timed_out;
    if (ready < 0) return Received::closed;
    ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Received::closed;
    got += size_t(r);
  }
  return Received::all;
}

sockaddr_in resolve(const LaunchEnv& env) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(env.master_addr.c_str(), nullptr, &hints, &found);
  if (rc != 0 || !found)
    raise_net("MASTER_ADDR " + alpha::quoted(env.master_addr), std::string("cannot resolve: ") + gai_strerror(rc));
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  addr.sin_port = htons(uint16_t(env.master_port));
  return addr;
}

// One connection attempt, bounded by the deadline (a host that drops packets would otherwise hold a
// blocking connect for minutes). Returns the connected socket, or -1.
int try_connect(const sockaddr_in& addr, Clock::time_point deadline) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  if (rc < 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof error;
    if (::poll(&p, 1, std::min(remaining_ms(deadline), 1000)) == 1 &&
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0)
      rc = 0;
  }
  if (rc != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, flags);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// One request and its reply; nullopt when the connection closed or the deadline passed (`timed_out` says which).
std::optional<std::string> exchange(int fd, uint8_t op, const std::string& key, const std::string& value,
                                    Clock::time_point deadline, bool& timed_out) {
  char header[4];
  timed_out = false;
  if (!send_all(fd, frame_request(op, key, value))) return std::nullopt;
  Received got = recv_exact(fd, header, 4, deadline);
  std::string reply;
  if (got == Received::all) {
    reply.resize(get_u32(header));
    got = recv_exact(fd, reply.data(), reply.size(), deadline);
  }
  timed_out = got == Received::timed_out;
  if (got != Received::all) return std::nullopt;
  return reply;
}

std::vector<RankStatus> parse_statuses(const std::string& text) {
  std::vector<RankStatus> out;
  std::istringstream lines(text);
  int connected = 0, ever = 0;
  long long progress = -1;
  while (lines >> connected >> ever >> progress) out.push_back({connected != 0, ever != 0, int64_t(progress)});
  return out;
}

}  // namespace

FailedRank find_failed_rank(const std::vector<RankStatus>& statuses, int self) {
  for (size_t r = 0; r < statuses.size(); ++r)
    if (int(r) != self && statuses[r].ever_connected && !statuses[r].connected)
      return {int(r), "its process ended (its connection to the rendezvous closed)"};
  for (size_t r = 0; r < statuses.size(); ++r)
    if (int(r) != self && !statuses[r].ever_connected) return {int(r), "it never reached the rendezvous"};
  int behind = -1;
  int64_t lowest = INT64_MAX, highest = INT64_MIN;
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].progress < lowest) lowest = statuses[r].progress, behind = int(r);
    highest = std::max(highest, statuses[r].progress);
  }
  if (behind >= 0 && lowest < highest)
    return {behind, "it hung: it last reported step " + std::to_string(lowest) + " while another rank reached step " +
                        std::to_string(highest)};
  return {-1, "every rank is alive and at the same step (a network or library failure)"};
}

// Rank 0's server: one thread polling the listening socket and every rank's connection.
class TcpStore::Server {
 public:
  Server(const LaunchEnv& env) : statuses_(size_t(env.world_size)) {
    sockaddr_in addr = resolve(env);
    // Loopback masters are served on loopback only; any other address on every interface, since the
    // name the other nodes use (MASTER_ADDR) may resolve differently here (e.g. 127.0.1.1 in /etc/hosts).
    if ((ntohl(addr.sin_addr.s_addr) >> 24) != 127) addr.sin_addr.s_addr = htonl(INADDR_ANY);
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    if (listen_ < 0 || ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_, 128) != 0) {
      std::string what = std::strerror(errno);
      if (listen_ >= 0) ::close(listen_);
      raise_net("rank 0 serving on " + endpoint(env), "cannot listen: " + what + " (is MASTER_PORT in use?)");
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    if (::pipe(wake_) != 0) raise_net("rank 0", "cannot create the server's wake-up pipe");
    thread_ = std::thread([this] { serve(); });
  }

  ~Server() {
    stop_ = true;
    char byte = 0;
    (void)!::write(wake_[1], &byte, 1);
    thread_.join();
    for (auto& [fd, c] : clients_) ::close(fd);
    ::close(listen_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  int port() const { return port_; }

 private:
  struct Client {
    std::string in;
    int rank = -1;
  };

  void serve() {
    while (!stop_) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_, POLLIN, 0}};
      for (auto& [fd, c] : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[1].revents & POLLIN) {
        int fd = ::accept(listen_, nullptr, nullptr);
        if (fd >= 0) clients_[fd] = Client{};
      }
      for (size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(fds[i].fd);
    }
  }

  void read_from(int fd) {
    char buffer[4096];
    ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return drop(fd);
    Client& c = clients_[fd];
    c.in.append(buffer, size_t(n));
    while (c.in.size() >= 5) {
      uint32_t key_len = get_u32(c.in.data() + 1);
      if (c.in.size() < 9 + size_t(key_len)) return;
      uint32_t value_len = get_u32(c.in.data() + 5 + key_len);
      size_t total = 9 + size_t(key_len) + value_len;
      if (c.in.size() < total) return;
      uint8_t op = uint8_t(c.in[0]);
      std::string key = c.in.substr(5, key_len), value = c.in.substr(9 + key_len, value_len);
      c.in.erase(0, total);
      handle(fd, c, op, key, value);
      if (!clients_.contains(fd)) return;  // dropped while handling (a reply could not be sent)
    }
  }

  void handle(int fd, Client& c, uint8_t op, const std::string& key, const std::string& value) {
    switch (op) {
      case kHello: {
        int rank = std::atoi(key.c_str());
        if (rank >= 0 && size_t(rank) < statuses_.size()) {
          c.rank = rank;
          statuses_[size_t(rank)].connected = statuses_[size_t(rank)].ever_connected = true;
        }
        return reply(fd, "");
      }
      case kSet: {
        values_[key] = value;
        auto waiting = waiting_.find(key);
        if (waiting != waiting_.end()) {
          std::vector<int> readers = std::move(waiting->second);
          waiting_.erase(waiting);
          for (int other : readers) reply(other, value);
        }
        return reply(fd, "");
      }
      case kGet: {
        auto found = values_.find(key);
        if (found != values_.end()) return reply(fd, found->second);
        waiting_[key].push_back(fd);
        return;
      }
      case kProgress:  // posted, not asked: no reply
        if (c.rank >= 0) statuses_[size_t(c.rank)].progress = std::atoll(value.c_str());
        return;
      case kStatus: {
        std::string out;
        for (const auto& s : statuses_)
          out += std::to_string(int(s.connected)) + " " + std::to_string(int(s.ever_connected)) + " " +
                 std::to_string(s.progress) + "\n";
        return reply(fd, out);
      }
      default: return drop(fd);
    }
  }

  void reply(int fd, const std::string& value) {
    if (!send_all(fd, frame_reply(value))) drop(fd);
  }

  void drop(int fd) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    if (it->second.rank >= 0) statuses_[size_t(it->second.rank)].connected = false;
    for (auto& [key, fds] : waiting_) std::erase(fds, fd);
    ::close(fd);
    clients_.erase(it);
  }

  int listen_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stop_ = false;
  std::thread thread_;
  std::map<int, Client> clients_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<int>> waiting_;
  std::vector<RankStatus> statuses_;
};

TcpStore::TcpStore(const LaunchEnv& env, std::chrono::milliseconds timeout) : env_(env), timeout_(timeout) {
  if (env_.rank == 0) {
    server_ = std::make_unique<Server>(env_);
    env_.master_port = server_->port();
  }
  port_ = env_.master_port;
  sockaddr_in addr = resolve(env_);
  auto deadline = Clock::now() + timeout_;
  while ((socket_ = try_connect(addr, deadline)) < 0) {
    if (Clock::now() >= deadline)
      raise_net("rank " + std::to_string(env_.rank) + " connecting to rank 0 at " + endpoint(env_),
                "no answer within " + std::to_string(timeout_.count()) +
                    " ms (is rank 0 running, and are MASTER_ADDR and MASTER_PORT the same on every rank?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, remaining_ms(deadline))));
  }
  request(kHello, std::to_string(env_.rank), "");
}

TcpStore::~TcpStore() {
  if (socket_ >= 0) ::close(socket_);
}

std::string TcpStore::request(uint8_t op, const std::string& key, const std::string& value) {
  std::string where = "rank " + std::to_string(env_.rank) + " asking rank 0 at " + endpoint(env_);
  if (broken_) raise_net(where, "the connection failed earlier");
  auto deadline = Clock::now() + timeout_;
  bool timed_out = false;
  std::optional<std::string> reply = exchange(socket_, op, key, value, deadline, timed_out);
  if (!reply) {
    broken_ = true;
    raise_net(where + (op == kGet ? " for " + alpha::quoted(key) : std::string()),
              timed_out ? "no reply within " + std::to_string(timeout_.count()) + " ms"
                        : "the connection closed (rank 0 ended)");
  }
  return *reply;
}

void TcpStore::set(const std::string& key, const std::string& value) { request(kSet, key, value); }
std::string TcpStore::get(const std::string& key) { return request(kGet, key, ""); }
// A training step's every synchronisation posts; waiting for a reply would add a round trip to rank 0's
// server thread to each.
void TcpStore::post_progress(int64_t progress) {
  if (!broken_ && send_all(socket_, frame_request(kProgress, "", std::to_string(progress)))) return;
  std::string what = broken_ ? "the connection failed earlier" : "the connection closed (rank 0 ended)";
  broken_ = true;
  raise_net("rank " + std::to_string(env_.rank) + " posting to rank 0 at " + endpoint(env_), what);
}

std::vector<RankStatus> TcpStore::statuses() { return parse_statuses(request(kStatus, "", "")); }

// Over a connection of its own that never says hello, so it works after this rank's connection broke
// and does not change this rank's status.
FailedRank TcpStore::failed_rank() {
  auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5));
  int fd = try_connect(resolve(env_), deadline);
  std::optional<std::string> reply;
  if (fd >= 0) {
    bool timed_out = false;
    reply = exchange(fd, kStatus, "", "", deadline, timed_out);
    ::close(fd);
  }
  if (!reply) return {0, "the rendezvous it serves is gone (rank 0's process ended)"};
  return find_failed_rank(parse_statuses(*reply), env_.rank);
}

}  // namespace alpha::distributed
