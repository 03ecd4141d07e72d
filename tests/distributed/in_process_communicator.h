// A communicator for tests: world_size threads of one process, each a rank, exchange host buffers
// through a shared group. Every collective is a rendezvous: each rank posts its buffers and waits at a
// barrier, then computes its own result from all the posted buffers (reductions add the ranks in rank
// order, in f32, so every rank gets the same bits), then waits at a second barrier so that no rank
// overwrites a buffer another one is still reading. A rank that stops calling collectives leaves the
// others waiting at the barrier; after the group's timeout they raise RankFailureError naming it.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "alpha/distributed/communicator.h"

namespace alpha::distributed::test {

class InProcessGroup {
 public:
  InProcessGroup(int world_size, std::chrono::milliseconds timeout);

  int world_size() const { return world_size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Waits until every rank has arrived at the current barrier (RankFailureError naming the first rank
  // that did not arrive, after the timeout or an abort).
  void arrive_and_wait(int rank, const char* collective);
  void abort(const std::string& reason);

  // The buffers each rank posted for the collective in progress.
  struct Posted {
    const void* send = nullptr;
    void* recv = nullptr;
  };
  std::vector<Posted>& posted() { return posted_; }

 private:
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> arrived_;
  int arrived_count_ = 0;
  uint64_t generation_ = 0;
  std::string aborted_;    // non-empty once aborted: the reason
  int aborted_rank_ = -1;  // the rank that did not arrive (-1: aborted from outside)
  std::vector<Posted> posted_;
};

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  Device device() const override { return Device::cpu(); }
  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) override;
  void all_reduce_many(const std::vector<Buffer>& buffers, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  // One part of reduce_many, which runs its parts one after another (each counts as a collective).
  void reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  void reduce_many(const std::vector<ReducePart>& parts, DType dtype, ReduceOp op) override;
  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override;
  void queue_in_collective_order(const std::function<void(Stream)>& work) override { work(Stream{}); }
  void broadcast(void* data, size_t count, DType dtype, int root) override;
  void synchronize() override {}  // every collective completes before it returns
  void mark_issued() override {}
  void synchronize_marked() override {}
  void synchronize_device() override {}
  void order_after_collectives() override {}
  void abort(const std::string& reason) override { group_->abort(reason); }
  std::chrono::milliseconds timeout() const override { return group_->timeout(); }

  int64_t collectives() const { return collectives_; }  // how many this rank has run

 private:
  // Posts the buffers, waits for all ranks, runs `compute` (reading the others' buffers), waits again.
  template <class Compute>
  void exchange(const char* collective, const void* send, void* recv, Compute compute);
  // all_reduce and all_reduce_many: each buffer reduced over the ranks' buffers of its index, in one exchange.
  void reduce_in_place(const char* collective, const std::vector<Buffer>& buffers, ReduceOp op);

  std::shared_ptr<InProcessGroup> group_;
  int rank_;
  int64_t collectives_ = 0;
};

// Runs fn(rank) on world_size threads and rethrows the first exception (by rank order) on the caller.
void run_ranks(int world_size, const std::function<void(int rank)>& fn);

}  // namespace alpha::distributed::test
