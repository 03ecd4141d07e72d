#include "distributed/in_process_communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>

#include "alpha/core/half.h"

namespace alpha::distributed::test {

namespace {

double load(const void* data, DType dtype, size_t i) {
  if (dtype == DType::f64) return static_cast<const double*>(data)[i];
  if (dtype == DType::f32) return static_cast<const float*>(data)[i];
  if (dtype == DType::f16) return float(static_cast<const f16*>(data)[i]);
  return float(static_cast<const bf16*>(data)[i]);
}
void store(void* data, DType dtype, size_t i, double value) {
  if (dtype == DType::f64)
    static_cast<double*>(data)[i] = value;
  else if (dtype == DType::f32)
    static_cast<float*>(data)[i] = float(value);
  else if (dtype == DType::f16)
    static_cast<f16*>(data)[i] = f16(float(value));
  else
    static_cast<bf16*>(data)[i] = bf16(float(value));
}

// Reduces one element over every rank's send buffer, in rank order, in Acc (f64 data in double, the rest
// in float).
template <typename Acc>
Acc reduce_in(const std::vector<InProcessGroup::Posted>& posted, size_t element, DType dtype, ReduceOp op) {
  Acc sum = 0;
  for (const auto& p : posted) sum += Acc(load(p.send, dtype, element));
  return op == ReduceOp::average ? sum / Acc(posted.size()) : sum;
}
double reduce_element(const std::vector<InProcessGroup::Posted>& posted, size_t element, DType dtype, ReduceOp op) {
  return dtype == DType::f64 ? reduce_in<double>(posted, element, dtype, op)
                             : reduce_in<float>(posted, element, dtype, op);
}

}  // namespace

InProcessGroup::InProcessGroup(int world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size), timeout_(timeout), arrived_(size_t(world_size)), posted_(size_t(world_size)) {}

void InProcessGroup::arrive_and_wait(int rank, const char* collective) {
  std::unique_lock lock(mutex_);
  auto fail = [&](int failed, const std::string& why) -> void {
    throw RankFailureError("[" + std::string(collective) + "] rank " + std::to_string(rank) + ": rank " +
                               std::to_string(failed) + " failed: " + why,
                           failed);
  };
  if (!aborted_.empty()) fail(aborted_rank_, aborted_);
  uint64_t generation = generation_;
  arrived_[size_t(rank)] = true;
  if (++arrived_count_ == world_size_) {
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++generation_;
    changed_.notify_all();
    return;
  }
  bool done = changed_.wait_for(lock, timeout_, [&] { return generation_ != generation || !aborted_.empty(); });
  if (done && aborted_.empty()) return;
  if (!aborted_.empty()) fail(aborted_rank_, aborted_);
  int missing = int(std::find(arrived_.begin(), arrived_.end(), false) - arrived_.begin());
  aborted_ = "it did not join the collective within " + std::to_string(timeout_.count()) + " ms";
  aborted_rank_ = missing;
  changed_.notify_all();
  fail(missing, aborted_);
}

void InProcessGroup::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (aborted_.empty()) aborted_ = reason;
  changed_.notify_all();
}

template <class Compute>
void InProcessCommunicator::exchange(const char* collective, const void* send, void* recv, Compute compute) {
  // No rank reads another's buffers past the second barrier, so posting the next collective's is safe.
  group_->posted()[size_t(rank_)] = {send, recv};
  group_->arrive_and_wait(rank_, collective);  // everyone has posted
  compute(group_->posted());
  group_->arrive_and_wait(rank_, collective);  // everyone has read
  ++collectives_;
}

void InProcessCommunicator::all_reduce(void* data, size_t count, DType dtype, ReduceOp op) {
  reduce_in_place("all_reduce", {{data, count, dtype}}, op);
}

void InProcessCommunicator::all_reduce_many(const std::vector<Buffer>& buffers, ReduceOp op) {
  reduce_in_place("all_reduce_many", buffers, op);
}

void InProcessCommunicator::reduce_in_place(const char* collective, const std::vector<Buffer>& buffers, ReduceOp op) {
  for (const Buffer& b : buffers) require_collective_dtype(collective, b.dtype);
  // One exchange: every rank posts its list, each buffer i reduced over the ranks' buffers i.
  std::vector<std::vector<double>> results(buffers.size());
  exchange(collective, &buffers, nullptr, [&](const auto& posted) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      std::vector<InProcessGroup::Posted> of_buffer;
      for (const auto& p : posted)
        of_buffer.push_back({(*static_cast<const std::vector<Buffer>*>(p.send))[i].data, nullptr});
      for (size_t e = 0; e < buffers[i].count; ++e)
        results[i].push_back(reduce_element(of_buffer, e, buffers[i].dtype, op));
    }
  });
  // Written after the last barrier: nobody reads this rank's buffers any more.
  for (size_t i = 0; i < buffers.size(); ++i)
    for (size_t e = 0; e < buffers[i].count; ++e) store(buffers[i].data, buffers[i].dtype, e, results[i][e]);
}

void InProcessCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) {
  require_collective_dtype("reduce_scatter", dtype);
  exchange("reduce_scatter", send, recv, [&](const auto& posted) {
    size_t first = size_t(rank_) * recv_count;
    for (size_t i = 0; i < recv_count; ++i) store(recv, dtype, i, reduce_element(posted, first + i, dtype, op));
  });
}

void InProcessCommunicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  require_collective_dtype("all_gather", dtype);
  size_t bytes = send_count * dtype_size(dtype);
  exchange("all_gather", send, recv, [&](const auto& posted) {
    for (size_t r = 0; r < posted.size(); ++r) {
      char* block = static_cast<char*>(recv) + r * bytes;
      if (block != posted[r].send) std::memcpy(block, posted[r].send, bytes);  // in place: this rank's block is there
    }
  });
}

void InProcessCommunicator::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root) {
  require_collective_dtype("reduce", dtype);
  std::vector<double> result;
  exchange("reduce", send, recv, [&](const auto& posted) {
    if (rank_ == root)
      for (size_t i = 0; i < count; ++i) result.push_back(reduce_element(posted, i, dtype, op));
  });
  // Written after the last barrier: nobody reads this rank's buffers any more (in place, the root's send is its recv).
  for (size_t i = 0; i < result.size(); ++i) store(recv, dtype, i, result[i]);
}

void InProcessCommunicator::reduce_many(const std::vector<ReducePart>& parts, DType dtype, ReduceOp op) {
  for (const ReducePart& p : parts) reduce(p.send, p.recv, p.count, dtype, op, p.root);
}

void InProcessCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  require_collective_dtype("all_to_all", dtype);
  const size_t bytes = count * dtype_size(dtype);
  std::vector<char> received(size_t(world_size()) * bytes);
  exchange("all_to_all", send, recv, [&](const auto& posted) {
    for (size_t q = 0; q < posted.size(); ++q)
      std::memcpy(received.data() + q * bytes, static_cast<const char*>(posted[q].send) + size_t(rank_) * bytes, bytes);
  });
  // Written after the last barrier: recv may be send, which the others read until then.
  std::memcpy(recv, received.data(), received.size());
}

void InProcessCommunicator::broadcast(void* data, size_t count, DType dtype, int root) {
  require_collective_dtype("broadcast", dtype);
  size_t bytes = count * dtype_size(dtype);
  std::vector<char> copy(bytes);
  exchange("broadcast", data, data,
           [&](const auto& posted) { std::memcpy(copy.data(), posted[size_t(root)].send, bytes); });
  std::memcpy(data, copy.data(), bytes);
}

void run_ranks(int world_size, const std::function<void(int rank)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace alpha::distributed::test
