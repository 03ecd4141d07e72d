// The collectives data-parallel training needs, over raw buffers of f64, f32, bf16 or f16, behind one interface: NCCL
// between GPUs (nccl_communicator.h), and an in-process one for the CPU tests (tests/distributed). A
// communicator is one rank of a group of world_size ranks; every rank calls the same collectives in the
// same order with the same counts.
//
// Ordering: a collective may return before it has completed (NCCL queues it on its own stream after the
// work already queued on the device's default stream); synchronize() waits for all of them within the
// timeout, and order_after_collectives() queues the device's later work after them instead. When a peer dies
// or hangs, synchronize() (or the collective itself) aborts the group and raises RankFailureError naming the
// rank that failed, never waiting forever.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "alpha/core/device.h"
#include "alpha/core/dtype.h"
#include "alpha/core/error.h"
#include "alpha/core/stream.h"
#include "alpha/tensor/tensor.h"

namespace alpha::distributed {

enum class ReduceOp { sum, average };

// A collective could not complete: a rank died, hung past the timeout, or the library reported an error.
// failed_rank() is the rank held responsible (-1 when the cause could not be tied to one).
class RankFailureError : public BackendError {
 public:
  RankFailureError(const std::string& message, int failed_rank) : BackendError(message), failed_rank_(failed_rank) {}
  int failed_rank() const { return failed_rank_; }

 private:
  int failed_rank_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Where the buffers passed to the collectives live (a CUDA device for NCCL, the CPU in-process).
  virtual Device device() const = 0;

  // In place: every rank's `count` elements become the elementwise sum (or average) over the ranks.
  virtual void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  // all_reduce of each buffer, as one collective (NCCL: one group, one launch), so gradients need not be packed
  // into one buffer first. Every rank passes the same counts and dtypes in the same order.
  struct Buffer {
    void* data;
    size_t count;
    DType dtype;
  };
  virtual void all_reduce_many(const std::vector<Buffer>& buffers, ReduceOp op) = 0;
  // `send` holds world_size blocks of `recv_count` elements; rank r receives the reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) = 0;
  // Rank r's `send_count` elements land at offset r * send_count of every rank's `recv`.
  virtual void all_gather(const void* send, void* recv, size_t send_count, DType dtype) = 0;
  // For each part, rank `root`'s `recv` receives the reduction of every rank's `count` elements of `send` (in place
  // when they are the same; the other ranks' `recv` is not touched), all as one collective (NCCL: one group, one
  // launch): the parts of a buffer reduce-scattered from where they are, each to the rank that owns it. Every rank
  // passes the same parts' counts and roots in the same order.
  struct ReducePart {
    const void* send;
    void* recv;
    size_t count;
    int root;
  };
  virtual void reduce_many(const std::vector<ReducePart>& parts, DType dtype, ReduceOp op) = 0;
  // Root's `count` elements are copied into every other rank's `data`.
  virtual void broadcast(void* data, size_t count, DType dtype, int root) = 0;
  // `send` holds world_size blocks of `count` elements: block q goes to rank q, which receives it as block r (this
  // rank's) of its `recv` (world_size blocks too). NCCL can move it with the copy engines between gather buffers.
  virtual void all_to_all(const void* send, void* recv, size_t count, DType dtype) = 0;
  // Queues device work in the collectives' order: after every collective issued so far, before those issued after
  // it, without holding up the device's default stream (NCCL: on its stream; in-process: run at once). For work that
  // combines what a collective delivered before the next one reads it, such as the rank-order sum of an
  // all-to-all's blocks. `work` is handed the stream to queue on (Stream{} on the CPU) and must allocate nothing:
  // the caching allocator orders its blocks on the default stream only.
  virtual void queue_in_collective_order(const std::function<void(Stream)>& work) = 0;

  // A zeroed [world_size(), block_numel] buffer on device() for all_gather to gather into in place (rank r sends
  // row r) and for all_to_all to send from or receive into, which a communicator may place where those move bytes
  // cheapest (NCCL: memory registered as a symmetric window, which its copy engines can move with no kernel on the
  // GPU's cores, under NCCL_CTA_POLICY=2). Collective: every
  // rank asks for the same sizes in the same order. ValueError for a negative block_numel, DTypeError for a dtype
  // the collectives do not carry.
  Tensor gather_buffer(int64_t block_numel, DType dtype);

  // Waits until every collective issued so far has completed. RankFailureError (after aborting the group)
  // when that takes longer than timeout() or a peer failed.
  virtual void synchronize() = 0;
  // The same for the collectives issued up to the last mark_issued() only (all of them with no mark since the
  // last wait): a host that reads what those made need not also wait for collectives queued after them, such
  // as ZeRO-1's all-gather of the updated weights, which then runs while the host reads the step and queues the
  // next one. The collectives left running are waited for by the next synchronize().
  virtual void mark_issued() = 0;
  virtual void synchronize_marked() = 0;
  // synchronize(), and also for the work queued on the device's default stream so far: a replayed CUDA graph's
  // collectives run inside the graph's launch there, where synchronize() does not see them. Forgets a mark.
  virtual void synchronize_device() = 0;
  // Makes the work queued on the device's default stream from now on wait for every collective issued so far,
  // without the host waiting (on a GPU, a stream's wait for an event). That wait has no timeout of its own: a
  // host that then waits for the device must call synchronize() first, which is where a failed peer is named.
  virtual void order_after_collectives() = 0;
  // Stops the group: pending and later collectives of every rank fail instead of waiting.
  virtual void abort(const std::string& reason) = 0;

  virtual std::chrono::milliseconds timeout() const = 0;

 protected:
  // gather_buffer's, its arguments checked: here an ordinary zeroed tensor.
  virtual Tensor make_gather_buffer(int64_t block_numel, DType dtype);
};

// Raises DTypeError naming `op` unless dtype is f64, f32, bf16 or f16, the dtypes the collectives carry.
void require_collective_dtype(const char* op, DType dtype);

}  // namespace alpha::distributed
