#include "alpha/distributed/nccl_communicator.h"

#include <cstdlib>
#include <cstring>
#include <string>

#if ALPHA_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <future>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "alpha/runtime/cuda_backend.h"
#endif

namespace alpha::distributed {

void set_nccl_environment() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

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

// Waits, within `timeout`, for a call of a non-blocking communicator that returned ncclInProgress.
ncclResult_t settled(ncclComm_t comm, ncclResult_t result, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (result == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::yield();
    ncclCommGetAsyncError(comm, &result);
  }
  return result;
}

// A window (de)registration on a non-blocking communicator can return ncclSuccess while it still runs (the
// next call then fails: "Attempt to use communicator before the previous operation returned ncclSuccess", seen
// on 2 H200s): its state is the communicator's asynchronous one.
ncclResult_t in_flight(ncclComm_t comm, ncclResult_t result) {
  if (result == ncclSuccess) ncclCommGetAsyncError(comm, &result);
  return result;
}

// ncclCommAbort, waited for at most `limit`: NCCL frees the communicator's device memory there, which waits for the
// device, and a collective inside a replayed CUDA graph can stay stuck on it after the abort (on 2 H200s the abort
// of a rank whose peer was killed mid-replay had not returned 30 s later). The caller then goes on to raise: the
// process is failing, and the abort finishes, or not, on a thread of its own.
void abort_within(ncclComm_t comm, std::chrono::milliseconds limit) {
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> done = finished->get_future();
  std::thread([comm, finished] {
    ncclCommAbort(comm);
    finished->set_value();
  }).detach();
  done.wait_for(limit);
}

// How long a failing rank waits for NCCL's abort (abort_within), at most: it returned within a second whenever no
// graph's collective was stuck (2 H200s).
constexpr std::chrono::milliseconds kAbortWait{10000};

// The device's default stream, where the ops queue their work.
cudaStream_t default_stream_of(int device) { return static_cast<cudaStream_t>(cuda::default_stream(device).handle); }

// Waits, within `timeout`, for the work queued so far on `streams` of `device` (null entries skipped): true once
// it has completed. A CUDA error counts as completed (nothing more runs on a device in that state). Never throws:
// it serves destructors and deleters.
bool drained(int device, std::initializer_list<cudaStream_t> streams, std::chrono::milliseconds timeout) {
  if (cudaSetDevice(device) != cudaSuccess) return true;
  std::vector<cudaEvent_t> events;
  for (cudaStream_t stream : streams) {
    if (!stream) continue;
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) break;
    events.push_back(event);
    if (cudaEventRecord(event, stream) != cudaSuccess) break;
  }
  const auto deadline = Clock::now() + timeout;
  bool done = true;
  for (cudaEvent_t event : events) {
    cudaError_t query;
    while ((query = cudaEventQuery(event)) == cudaErrorNotReady && Clock::now() < deadline) std::this_thread::yield();
    done = done && query != cudaErrorNotReady;
  }
  for (cudaEvent_t event : events) cudaEventDestroy(event);
  return done;
}

// The symmetric windows a communicator registered, shared with the buffers' owners: a buffer that outlives its
// communicator only frees its memory, its window having been deregistered before the communicator went (or
// released with it by an abort).
//
// ncclMemFree unmaps the memory at once, not in stream order as the caching allocator's blocks are reused: work
// still queued on the device (at the end of training, the optimiser's step reading gradients that are views of a
// bucket, which nothing waits for) would then fault with an illegal address, as two 2-GPU runs did on H200s
// (twenty-eighth session). So a buffer's memory is freed only once the device's default stream and the
// communicator's have finished what was queued before. After an abort, or once such a wait has run past the
// timeout, the memory is kept (leaked) rather than unmapped under a kernel that may still run: the process is failing
// then, and one timeout is all it waits.
struct Windows {
  std::mutex mutex;
  ncclComm_t comm = nullptr;      // null once the communicator is destroyed or aborted
  cudaStream_t stream = nullptr;  // the communicator's, null with comm
  int device = 0;
  std::chrono::milliseconds timeout{0};
  std::vector<ncclWindow_t> live;
  bool abandoned = false;  // an abort or a timed-out wait: memory released from now on is kept

  void release(ncclWindow_t window, void* memory) {
    cudaStream_t comm_stream;
    bool wait;
    {
      std::lock_guard lock(mutex);
      comm_stream = stream;
      wait = !abandoned;
    }
    if (!wait || !drained(device, {default_stream_of(device), comm_stream}, timeout)) {
      std::lock_guard lock(mutex);
      abandoned = true;
      return;
    }
    {
      std::lock_guard lock(mutex);
      auto it = std::find(live.begin(), live.end(), window);
      if (comm && it != live.end()) {
        settled(comm, in_flight(comm, ncclCommWindowDeregister(comm, window)), timeout);
        live.erase(it);
      }
    }
    ncclMemFree(memory);
  }
  // Before the communicator is destroyed (deregister = true) or after it was aborted.
  void close(bool deregister) {
    std::lock_guard lock(mutex);
    if (deregister)
      for (ncclWindow_t window : live) settled(comm, in_flight(comm, ncclCommWindowDeregister(comm, window)), timeout);
    live.clear();
    comm = nullptr;
    stream = nullptr;
    abandoned = abandoned || !deregister;
  }
};

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
    // NCCL's default CTA policy. NCCL_CTA_POLICY=2 in the environment (the zero-CTA policy) lets NCCL move
    // all-gathers and all-to-alls between symmetric windows (gather_buffer's) with the copy engines, off the GPU's
    // cores: faster on 2 H200s, but it was the default when two runs of --deterministic-reduce hit an illegal memory
    // access (docs/DISTRIBUTED.md; the likely cause, window memory freed under queued kernels, is fixed in Windows
    // below, whose test passes on 2 H200s), so it stays the user's choice until many more runs have shown the fault
    // gone.
    wait_ready(ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config), "ncclCommInitRankConfig");
    windows_->comm = comm_;
    windows_->stream = stream_;
    windows_->device = device_.index;
    windows_->timeout = timeout_;
  }

  ~NcclCommunicator() override {
    // The windows' collectives, and the default stream's work reading them, finish before they are deregistered.
    if (!aborted_) drained(device_.index, {default_stream_of(device_.index), stream_}, timeout_);
    windows_->close(/*deregister=*/!aborted_);
    if (!aborted_) {
      // Finalize flushes what is queued; a peer that is gone makes it wait, so it is bounded too.
      if (settled(comm_, ncclCommFinalize(comm_), timeout_) == ncclSuccess)
        ncclCommDestroy(comm_);
      else
        abort_within(comm_, std::min(timeout_, kAbortWait));
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
  void all_reduce_many(const std::vector<Buffer>& buffers, ReduceOp op) override {
    std::vector<ncclDataType_t> types;
    for (const Buffer& b : buffers) types.push_back(nccl_dtype("all_reduce_many", b.dtype));
    grouped("ncclAllReduce (grouped)", buffers.size(), [&](size_t i) {
      return ncclAllReduce(buffers[i].data, buffers[i].data, buffers[i].count, types[i], nccl_op(op), comm_, stream_);
    });
  }
  void reduce_many(const std::vector<ReducePart>& parts, DType dtype, ReduceOp op) override {
    ncclDataType_t type = nccl_dtype("reduce_many", dtype);
    grouped("ncclReduce (grouped)", parts.size(), [&](size_t i) {
      return ncclReduce(parts[i].send, parts[i].recv, parts[i].count, type, nccl_op(op), parts[i].root, comm_, stream_);
    });
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
  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override {
    ncclDataType_t type = nccl_dtype("all_to_all", dtype);
    launch("ncclAlltoAll", [&] { return ncclAlltoAll(send, recv, count, type, comm_, stream_); });
  }
  void queue_in_collective_order(const std::function<void(Stream)>& work) override {
    if (aborted_) fail("queue_in_collective_order", "the communicator was aborted earlier");
    cuda::set_device(device_.index);
    work(Stream{stream_});
  }

  // ncclMemAlloc memory registered as a symmetric window (the same offsets on every rank): NCCL 2.28 can move an
  // all-gather between such windows with the copy engines (measured on 2 H200s: bench/nccl_buffers.cu, with
  // NCCL_CTA_POLICY=2). Only where every block starts on a 4-byte boundary: the GPU machines' NCCL, 2.28.3, returned
  // wrong elements for bf16 blocks that did not (docs/PERFORMANCE.md, twenty-seventh session); those get an ordinary
  // buffer.
  // Where the communicator has no symmetric memory, the registration gives no window and the memory serves as an
  // ordinary buffer.
  Tensor make_gather_buffer(int64_t block_numel, DType dtype) override {
    if (block_numel * int64_t(dtype_size(dtype)) % 4 != 0) return Communicator::make_gather_buffer(block_numel, dtype);
    constexpr const char* op = "gather_buffer";
    if (aborted_) fail(op, "the communicator was aborted earlier");
    cuda::set_device(device_.index);
    const size_t alignment = NCCL_WIN_REQUIRED_ALIGNMENT, numel = size_t(world_size_) * size_t(block_numel);
    const size_t bytes = std::max<size_t>((numel * dtype_size(dtype) + alignment - 1) / alignment, 1) * alignment;
    void* memory = nullptr;
    check(ncclMemAlloc(&memory, bytes), "ncclMemAlloc");
    ncclWindow_t window = nullptr;
    try {
      check_cuda(cudaMemset(memory, 0, bytes), "cudaMemset");
      wait_ready(in_flight(comm_, ncclCommWindowRegister(comm_, memory, bytes, &window, NCCL_WIN_COLL_SYMMETRIC)),
                 "ncclCommWindowRegister");
    } catch (...) {
      ncclMemFree(memory);
      throw;
    }
    if (window) {
      std::lock_guard lock(windows_->mutex);
      windows_->live.push_back(window);
    }
    std::shared_ptr<void> owner(memory, [windows = windows_, window](void* p) { windows->release(window, p); });
    return Tensor::from_storage(std::make_shared<Storage>(device_, memory, bytes, std::move(owner)),
                                {world_size_, block_numel}, {block_numel, 1}, 0, dtype);
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

  void synchronize_device() override {
    if (aborted_) fail("synchronize_device", "the communicator was aborted earlier");
    follow_default_stream();
    synchronize();
  }

  void order_after_collectives() override {
    record_issued(issued_, "order_after_collectives");
    check_cuda(cudaStreamWaitEvent(default_stream_of(device_.index), issued_, 0), "cudaStreamWaitEvent");
  }

  void abort(const std::string&) override {
    if (!aborted_) abort_group();
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
    follow_default_stream();
    wait_ready(call(), name);
  }

  // The communicator's stream waits for the work queued so far on the device's default stream.
  void follow_default_stream() {
    cuda::set_device(device_.index);
    check_cuda(cudaEventRecord(queued_, default_stream_of(device_.index)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, queued_, 0), "cudaStreamWaitEvent");
  }

  // call(0) .. call(count - 1) as one NCCL group: one launch.
  template <class Call>
  void grouped(const char* name, size_t count, Call call) {
    launch(name, [&] {
      ncclResult_t result = ncclGroupStart();
      for (size_t i = 0; i < count && (result == ncclSuccess || result == ncclInProgress); ++i) result = call(i);
      const ncclResult_t ended = ncclGroupEnd();  // closes the group whatever happened inside it
      return result == ncclSuccess || result == ncclInProgress ? ended : result;
    });
  }

  // A non-blocking call returns ncclInProgress until it has been issued; polls it within the timeout.
  void wait_ready(ncclResult_t result, const char* call) {
    result = settled(comm_, result, timeout_);
    if (result == ncclInProgress) fail(call, "it did not complete within " + std::to_string(timeout_.count()) + " ms");
    check(result, call);
  }

  void check(ncclResult_t result, const char* call) {
    if (result != ncclSuccess)
      fail(call, std::string(ncclGetErrorString(result)) + (comm_ ? std::string(": ") + ncclGetLastError(comm_) : ""));
  }

  // The windows released without deregistering (their memory kept), then NCCL's abort, waited for a bounded time.
  void abort_group() {
    aborted_ = true;
    windows_->close(/*deregister=*/false);
    abort_within(comm_, std::min(timeout_, kAbortWait));
  }

  // Names the failed rank (asking the rendezvous), aborts the communicator and raises.
  [[noreturn]] void fail(const char* call, const std::string& what) {
    FailedRank failed = store_->failed_rank();
    if (comm_ && !aborted_) abort_group();
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
  std::shared_ptr<Windows> windows_ = std::make_shared<Windows>();
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  set_nccl_environment();
  return std::make_unique<NcclCommunicator>(env, std::make_shared<TcpStore>(env, timeout), timeout);
}

#else

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, std::chrono::milliseconds) {
  raise<ConfigError>("train", "world size", "1 in a build without NCCL (build with CUDA and NCCL: ALPHA_NCCL=ON)",
                     std::to_string(env.world_size) + " ranks from the " + env.source + " environment");
}

#endif

}  // namespace alpha::distributed
