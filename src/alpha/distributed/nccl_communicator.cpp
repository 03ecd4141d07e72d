#include "alpha/distributed/nccl_communicator.h"

#include <cstdlib>
#include <cstring>
#include <string>

#if ALPHA_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <thread>

#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha::distributed {

void set_nccl_environment(bool deterministic) {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  if (deterministic) {
    setenv("NCCL_ALGO", "Ring", 1);
    setenv("NCCL_PROTO", "Simple", 1);
  }
}

#if ALPHA_WITH_NCCL

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kUniqueIdKey = "nccl_unique_id";

void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw BackendError(std::string("[nccl] ") + call + ": " + cudaGetErrorString(status));
}

ncclDataType_t nccl_dtype(const char* op, DType dtype) {
  require_collective_dtype(op, dtype);
  switch (dtype) {
    case DType::f64:
      return ncclFloat64;
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    default:
      return ncclBfloat16;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclAvg; }

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const LaunchEnv& env, std::shared_ptr<TcpStore> store, std::chrono::milliseconds timeout)
      : rank_(env.rank),
        world_size_(env.world_size),
        device_(Device::cuda(env.local_rank)),
        store_(std::move(store)),
        timeout_(timeout) {
    cuda::require_device("nccl", device_);
    cuda::set_device(device_.index);
    ncclUniqueId id;
    if (rank_ == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store_->set(kUniqueIdKey, std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      std::string bytes = store_->get(kUniqueIdKey);
      if (bytes.size() != sizeof id)
        raise<BackendError>("nccl", "unique id", std::to_string(sizeof id) + " bytes", std::to_string(bytes.size()));
      std::memcpy(&id, bytes.data(), sizeof id);
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&marked_done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    // Non-blocking: init and collectives return at once, so a missing peer shows as a timeout here.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    wait_ready(ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config), "ncclCommInitRankConfig");
  }

  ~NcclCommunicator() override {
    if (!aborted_) {
      // Finalize flushes what is queued; a peer that is gone makes it wait, so it is bounded too.
      ncclResult_t state = ncclCommFinalize(comm_);
      auto deadline = Clock::now() + timeout_;
      while (state == ncclInProgress && Clock::now() < deadline) ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    cudaEventDestroy(queued_);
    cudaEventDestroy(done_);
    cudaEventDestroy(issued_);
    cudaEventDestroy(marked_done_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Device device() const override { return device_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    ncclDataType_t type = nccl_dtype("all_reduce", dtype);
    launch("ncclAllReduce", [&] { return ncclAllReduce(data, data, count, type, nccl_op(op), comm_, stream_); });
  }
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) override {
    ncclDataType_t type = nccl_dtype("reduce_scatter", dtype);
    launch("ncclReduceScatter",
           [&] { return ncclReduceScatter(send, recv, recv_count, type, nccl_op(op), comm_, stream_); });
  }
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override {
    ncclDataType_t type = nccl_dtype("all_gather", dtype);
    launch("ncclAllGather", [&] { return ncclAllGather(send, recv, send_count, type, comm_, stream_); });
  }
  void broadcast(void* data, size_t count, DType dtype, int root) override {
    ncclDataType_t type = nccl_dtype("broadcast", dtype);
    launch("ncclBroadcast", [&] { return ncclBroadcast(data, data, count, type, root, comm_, stream_); });
  }

  void synchronize() override {
    record_issued(done_, "synchronize");
    marked_ = false;
    wait_for(done_, "synchronize");
  }

  void mark_issued() override {
    record_issued(marked_done_, "mark_issued");
    marked_ = true;
  }

  void synchronize_marked() override {
    if (!marked_) return synchronize();
    if (aborted_) fail("synchronize_marked", "the communicator was aborted earlier");
    cuda::set_device(device_.index);
    marked_ = false;
    wait_for(marked_done_, "synchronize_marked");
  }

  void order_after_collectives() override {
    record_issued(issued_, "order_after_collectives");
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda::default_stream(device_.index).handle), issued_, 0),
               "cudaStreamWaitEvent");
  }

  void abort(const std::string&) override {
    if (aborted_) return;
    aborted_ = true;
    ncclCommAbort(comm_);
  }

 private:
  // Records `event` on the communicator's stream: it completes with every collective issued so far.
  void record_issued(cudaEvent_t event, const char* op) {
    if (aborted_) fail(op, "the communicator was aborted earlier");
    cuda::set_device(device_.index);
    check_cuda(cudaEventRecord(event, stream_), "cudaEventRecord");
  }

  // Polls `event` (recorded on the communicator's stream) until it completes, failing the group on NCCL's
  // asynchronous error or after the timeout.
  void wait_for(cudaEvent_t event, const char* op) {
    // What the rendezvous shows to the other ranks if this one hangs from here on. Not reaching it is no
    // failure by itself: rank 0 may have finished its last step and closed it while this rank's last
    // collective completes; the collective decides, and fail() asks over a connection of its own.
    try {
      store_->post_progress(++synchronizations_);
    } catch (const IOError&) {
    }
    auto deadline = Clock::now() + timeout_;
    while (true) {
      cudaError_t query = cudaEventQuery(event);
      if (query == cudaSuccess) break;
      if (query != cudaErrorNotReady) check_cuda(query, "cudaEventQuery");
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress)
        fail(op, std::string("NCCL reported ") + ncclGetErrorString(state) + ": " + ncclGetLastError(comm_));
      if (Clock::now() > deadline)
        fail(op, "the collectives did not complete within " + std::to_string(timeout_.count()) + " ms");
      std::this_thread::yield();
    }
  }

  // Queues a collective on the communicator's stream after the work on the default stream.
  template <class Call>
  void launch(const char* name, Call call) {
    if (aborted_) fail(name, "the communicator was aborted earlier");
    cuda::set_device(device_.index);
    check_cuda(cudaEventRecord(queued_, static_cast<cudaStream_t>(cuda::default_stream(device_.index).handle)),
               "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, queued_, 0), "cudaStreamWaitEvent");
    wait_ready(call(), name);
  }

  // A non-blocking call returns ncclInProgress until it has been issued; polls it within the timeout.
  void wait_ready(ncclResult_t result, const char* call) {
    auto deadline = Clock::now() + timeout_;
    while (result == ncclInProgress) {
      if (Clock::now() > deadline) fail(call, "it did not complete within " + std::to_string(timeout_.count()) + " ms");
      std::this_thread::yield();
      ncclCommGetAsyncError(comm_, &result);
    }
    check(result, call);
  }

  void check(ncclResult_t result, const char* call) {
    if (result != ncclSuccess)
      fail(call, std::string(ncclGetErrorString(result)) + (comm_ ? std::string(": ") + ncclGetLastError(comm_) : ""));
  }

  // Names the failed rank (asking the rendezvous), aborts the communicator and raises.
  [[noreturn]] void fail(const char* call, const std::string& what) {
    FailedRank failed = store_->failed_rank();
    if (comm_ && !aborted_) ncclCommAbort(comm_);
    aborted_ = true;
    std::string who = failed.rank >= 0 ? "rank " + std::to_string(failed.rank) + " failed: " + failed.why
                                       : "no rank could be blamed: " + failed.why;
    throw RankFailureError(
        "[nccl] " + std::string(call) + " on rank " + std::to_string(rank_) + ": " + what + "; " + who, failed.rank);
  }

  int rank_, world_size_;
  Device device_;
  std::shared_ptr<TcpStore> store_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t queued_ = nullptr, done_ = nullptr, issued_ = nullptr;
  cudaEvent_t marked_done_ = nullptr;  // mark_issued()'s, valid while marked_
  bool marked_ = false;
  int64_t synchronizations_ = 0;
  bool aborted_ = false;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, bool deterministic,
                                                     std::chrono::milliseconds timeout) {
  set_nccl_environment(deterministic);
  return std::make_unique<NcclCommunicator>(env, std::make_shared<TcpStore>(env, timeout), timeout);
}

#else

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, bool, std::chrono::milliseconds) {
  raise<ConfigError>("train", "world size", "1 in a build without NCCL (build with CUDA and NCCL: ALPHA_NCCL=ON)",
                     std::to_string(env.world_size) + " ranks from the " + env.source + " environment");
}

#endif

}  // namespace alpha::distributed
