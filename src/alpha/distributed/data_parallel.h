// Data-parallel training over a Communicator: every rank runs the same model on its own slice of the global
// batch, and the gradients are averaged over the ranks before the optimiser step.
//
// Buckets: the parameters are grouped, in reverse order (the order backward finishes them: the last layer's
// first), into flat buffers, each closed once it holds at least bucket_bytes (so a parameter larger than that
// closes the bucket it joins). In the last micro-step's backward (gradient accumulation reduces once per optimiser
// step), given gradient_ready_hook(), a bucket is packed (one copy_many launch) and its collective launched as soon as
// the last of its gradients is complete, in bucket order, so on a GPU the collectives run on the
// communicator's stream while backward goes on; queue_reduction() launches what is left, queues the device's
// later work behind it, and makes each parameter's gradient its averaged run of the bucket (a view: nothing is
// copied back). Gradients are averaged (sum / world_size). The plain step in the parameters' dtype (not ZeRO-1, not
// deterministic, no reduce_dtype) packs only the parameters smaller than packed_below_bytes (biases, LayerNorms) into
// a buffer of the bucket's: the others' gradients are all-reduced where they are, beside it, as one grouped collective
// (Communicator::all_reduce_many). On 2 H200s packing everything cost about 0.28 ms of a 33 ms gpt2-124m step, all on
// the device's stream, and packing nothing made NCCL's group slower by more than that on `seed`'s many small
// parameters (docs/PERFORMANCE.md, twenty-ninth session).
//
// ZeRO-1: each bucket is padded to whole aligned shards (kShardAlignment) and split into world_size equal shards; the
// gradients are reduce-scattered, so rank r holds the averaged gradient of shard r of every bucket, keeps
// AdamW's m and v for those elements only, updates those parameters, and all-gathers the updated values. In the
// parameters' dtype (not deterministic, no reduce_dtype) the reduce-scatter is a group of reduces
// (Communicator::reduce_many): each gradient of at least packed_below_bytes goes from where backward left it, each
// run of the smaller ones from the bucket's buffer they are packed into, every part to the rank whose shard it falls
// in, the root writing the average at its place in its shard. So the large gradients are not copied (on 2 H200s the
// packing cost 0.28 ms of a 33 ms gpt2-124m step: docs/PERFORMANCE.md, thirty-seventh session), and the shards are
// the same elements in the same places as a packed reduce-scatter gives.
// Clipping uses the global norm: each bucket's sum of squares over the ranks' shards (an all-reduce), then
// the buckets' sums added in order. The parameters' values live in one buffer per bucket (each parameter's
// value is a view of its run there), so the all-gather lands in place. When every parameter holds a compute
// copy of one narrower dtype (bf16 training with f32 masters, the trainer's case), the step writes this rank's
// part of the copies beside the update and all-gathers only the copies, half the bytes, which is all the next
// forward and backward read: each rank's f32 values outside its own shards then stay as they were until
// complete_parameters() gathers them (before a checkpoint, an evaluation, the end). The copies' buffers are the
// communicator's gather buffers, which NCCL can gather with the copy engines (NCCL_CTA_POLICY=2). On 2 H200s a
// collective beside the forward or backward slowed their kernels about as much as it hid, so the bytes not moved are
// what count.
//
// reduce_dtype bf16: the buckets hold bf16, so packing rounds each rank's f32 gradients to bf16 (one launch a
// bucket) and the collectives move half the bytes; the averaged gradients handed back (plain) or the shards
// stepped (ZeRO-1) are bf16, which AdamW reads beside the f32 masters. The bucket layout stays the parameters'
// dtype's, so ZeRO-1's shards (and checkpoints) do not depend on it. Not with `deterministic`.
//
// Determinism: the bucket layout is a pure function of the parameter shapes, bucket_bytes and world_size,
// and the collectives run in the same order every step. The `deterministic` option makes the sums independent
// of the communicator's algorithm: a reduce-scatter composed of an all-to-all (rank r receives every rank's shard
// r of the bucket) and a sum the rank queues itself in the collectives' order (ops::sum_rows: the ranks' shards
// added in rank order, as gradient accumulation adds, then scaled by 1/world_size); the plain step then
// all-gathers the averaged shards in place (ZeRO-1 keeps its shard; its norm likewise gathers the ranks' sums of
// squares and adds them in rank order). So N ranks give the bits of one process accumulating the same N
// micro-batches in rank order when N is a power of two (the scaling is then exact on both sides). It moves the
// bytes of an all-reduce (a reduce-scatter), and the buckets and the all-to-all's receiver are the communicator's
// gather buffers, which NCCL can move with the copy engines (NCCL_CTA_POLICY=2: no NCCL kernel then takes the GPU's
// cores while backward runs, only the sums; docs/PERFORMANCE.md, twenty-eighth session).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "alpha/distributed/communicator.h"
#include "alpha/nn/module.h"
#include "alpha/ops/optim.h"
#include "alpha/tensor/tensor.h"

namespace alpha::distributed {

struct DataParallelOptions {
  int64_t bucket_bytes = 25 << 20;  // PyTorch DDP's default bucket size
  bool zero1 = false;               // shard the optimiser state (reduce-scatter + all-gather)
  bool deterministic = false;       // all-gather and add in rank order (above)
  // The gradients' dtype in the buckets and collectives: the parameters' (none), or bf16 (below).
  std::optional<DType> reduce_dtype = std::nullopt;
  // In the parameters' dtype (not deterministic) the plain step and ZeRO-1 reduce a gradient from where it is from
  // this size up, and pack smaller ones.
  int64_t packed_below_bytes = 1 << 20;
  void validate() const;  // ConfigError naming the field
};

// A parameter's run of elements inside a bucket.
struct BucketEntry {
  size_t parameter;  // index into the parameter list
  int64_t offset;    // first element inside the bucket
  int64_t numel;
};

struct Bucket {
  std::vector<BucketEntry> entries;
  int64_t numel = 0;         // elements of the parameters
  int64_t padded_numel = 0;  // numel rounded up to a multiple of kShardAlignment · world_size (the tail stays zero)
  int64_t shard_numel = 0;   // padded_numel / world_size: one rank's shard
};

// Every shard holds a multiple of this many elements, so each rank's shard of a bucket starts a multiple of 16 bytes
// from the bucket's start (bf16, f16, f32 and f64 alike): the rank-order sum moves whole 16-byte vectors, and NCCL's
// copy engines gather the bf16 copies correctly (the GPU machines' NCCL, 2.28.3, returned wrong elements for bf16
// blocks off a 4-byte boundary).
inline constexpr int64_t kShardAlignment = 8;

// Buckets over parameters of the given element counts, in reverse order, each closed once it holds at
// least bucket_bytes (elements of element_bytes bytes).
std::vector<Bucket> plan_buckets(const std::vector<int64_t>& numels, size_t element_bytes, int64_t bucket_bytes,
                                 int world_size);

// Where rank `rank`'s shard of a bucket meets a parameter: shard_offset counts from the shard's start.
struct ShardSegment {
  size_t bucket;
  size_t parameter;
  int64_t parameter_offset;
  int64_t shard_offset;
  int64_t numel;
};
std::vector<ShardSegment> shard_segments(const std::vector<Bucket>& buckets, int rank);

class DataParallel {
 public:
  // The parameters' values and gradients must live on the communicator's device, all of one floating dtype.
  DataParallel(Communicator& communicator, std::vector<nn::NamedParameter> parameters, DataParallelOptions options);

  // After the last micro-step's backward. Without ZeRO-1: every rank's gradients become the average over
  // the ranks, views of the buckets (bf16 under a bf16 reduction: release them, as the optimiser does after its
  // step, before another backward, whose f32 sums a bf16 view cannot take). With ZeRO-1: this rank's shards of the
  // buckets hold the averaged gradient, and the model's gradients are released (consumed: the next backward's gradients
  // become them afresh). `step_losses`, when given, is this rank's loss of each micro-batch (a contiguous f32 vector on
  // the communicator's device, as long on every rank): every rank's are gathered beside the gradients, so a step waits
  // for its peers once, and returned rank by rank (the order of the global batch). Gathered, not reduced: every rank
  // can sum them in f64 in that order, so the loss is the same bits on every rank and as one process accumulating the
  // global batch. Queued only: the device's later work waits for the collectives
  // (Communicator::order_after_collectives) and the host does not, so the optimiser's step can be queued behind them at
  // once; the gathered losses are returned on the device. The caller must call synchronize_step() before it waits for
  // the device (that is where a failed peer is named within the timeout).
  Tensor queue_reduction(const Tensor& step_losses = Tensor());
  // Waits, within the communicator's timeout, for the collectives a step's numbers come from (the reduction, the
  // gathered losses, ZeRO-1's norm), not for the weights' all-gather queue_sharded_step queues after them: the
  // host reads the step and queues the next one while that runs (the next synchronize waits for it).
  void synchronize_step();
  // For autograd::backward in the last micro-step: launches each bucket's collective as soon as its
  // gradients are complete (buckets in order, the same on every rank). queue_reduction() then finishes.
  autograd::LeafReadyFn gradient_ready_hook();

  // ZeRO-1's step, queued as the one-GPU step is (nothing here waits for the device or the peers), after
  // queue_reduction:
  //   norm = queue_sharded_norm();                                      // read it when the step is done
  //   queue_sharded_step(lr, ops::step_guard(norm, losses, scale, clip), adamw);
  //   synchronize_step(), read the norm and the losses, then settle_sharded_step(applied).
  // queue_sharded_norm: the global L2 norm of the averaged gradients as a 0-d f64 tensor on the device, the
  // same bits on every rank: each rank's per-bucket sums of squares of its shards, summed over the ranks by an
  // all-reduce, then added in bucket order (ops::sums_of_squares, ops::norm_of_sums_of_squares).
  Tensor queue_sharded_norm();
  // AdamW on this rank's shards, the gradients multiplied by `factor` (a single-element f64 tensor on the device,
  // ops::step_guard's: unscaling and clipping; a NaN skips the update there), with learning rate lr and step
  // step_count() + 1 (the scalars written to the device, as train::AdamW::queued_step does), and the updated
  // parameters all-gathered into every rank's model, bucket by bucket: each bucket's all-gather is queued behind
  // its update, so it runs beside the next bucket's. ValueError while a step is queued and not settled.
  // When every parameter holds a compute copy of one bf16/f16 dtype (the trainer's mixed precision), the step
  // writes this rank's part of the copies beside the update, rounded as train::AdamW's step rounds them (to
  // nearest, or stochastically with the bits it would draw: parameter k as tensor k, the whole tensor's element
  // indices), all-gathers the copies, and the held copies become views of the gathered buffers; the f32 values
  // stay stale (settle_sharded_step). Otherwise the values are gathered here, the held copies dropped, and
  // with a stochastic_rounding_seed settle_sharded_step rewrites each held bf16/f16 copy from the gathered value
  // with those bits (ops::stochastic_round); parameters holding no copy are left to round to nearest on use.
  struct AdamW {
    double beta1, beta2, eps, weight_decay;
    std::optional<uint64_t> stochastic_rounding_seed = std::nullopt;
  };
  void queue_sharded_step(double lr, const Tensor& factor, const AdamW& adamw);
  // queue_sharded_step in two halves, for a step captured once and replayed (a CUDA graph), as
  // train::AdamW::prepare_step and queue_update: prepare_sharded_step does the host's part (the checks, the copies'
  // buffers, the per-step scalars of lr and the step count written where the update reads them) and marks the step
  // queued; queue_sharded_update queues the updates and the all-gathers, which a capture records once and every
  // replay makes with the scalars the host prepared before it.
  void prepare_sharded_step(double lr, const AdamW& adamw);
  void queue_sharded_update(const Tensor& factor);
  // Says whether the queued step was applied (the factor finite: the caller read the norm and the losses),
  // which advances step_count() or not; a step not applied leaves the held compute copies as they were.
  // When the step gathered the copies and was applied, the values outside this rank's shards are stale from
  // then on: the model may only run forward and backward (which read the held copies) until complete_parameters().
  void settle_sharded_step(bool applied);
  // All-gathers the values the copies-gathering steps left stale and waits for them (within the communicator's
  // timeout), so the host and the device can read every parameter's value: before a checkpoint, an evaluation
  // or the end of training. A collective: every rank calls it at the same point; nothing to do when none is
  // stale. The next queue_sharded_step raises ValueError if a held copy was replaced while values were stale.
  void complete_parameters();

  // ZeRO-1 state of this rank: m/bucket_<b> and v/bucket_<b> (its shard of each bucket), and the step.
  std::vector<std::pair<std::string, Tensor>> shard_state() const;
  int64_t step_count() const { return step_count_; }
  // Restores a state shard_state exported, under the same bucket layout; ValueError naming the tensor
  // when one is missing, unknown or of another length.
  void load_shard_state(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t step_count);

  // ZeRO-1: this rank's shard of every bucket (after queue_reduction, the averaged gradient there). ConfigError for
  // the plain step that reduces in place (no buckets held).
  std::vector<Tensor> gradient_shards() const;
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<ShardSegment>& segments() const { return segments_; }
  const DataParallelOptions& options() const { return options_; }
  Communicator& communicator() { return communicator_; }

 private:
  void on_gradient_ready(const autograd::VariableState& leaf);
  bool reduces_in_place() const;      // plain, not deterministic, in the parameters' dtype: no packing (above)
  bool reduces_to_owners() const;     // ZeRO-1, not deterministic, in the parameters' dtype: reduces (above)
  void reduce_to_owners(size_t bucket);  // its reduces, after the packing (those of other dtypes packed too)
  // Reducing to the owners, a large gradient is sent from where it is when it has the parameters' dtype; one of
  // another dtype is packed, converted, at its place in the bucket's buffer and sent from there.
  bool read_where_it_is(const Tensor& gradient) const;
  void launch_bucket(size_t bucket);  // packs its gradients (unless in place), queues its collective
  Tensor flat_gradient(size_t parameter) const;             // 1-D view of a parameter's gradient
  static Tensor run_of(const Tensor& buffer, const BucketEntry& entry);  // a parameter's run in a bucket's buffer
  Tensor shard_of(const Tensor& buffer, size_t bucket) const;          // this rank's shard of a bucket's buffer
  void all_gather_shard(const Tensor& buffer, size_t bucket);          // this rank's shard into every rank's, in place
  DType gathered_copy_dtype() const;  // the held copies' common narrower dtype, else dtype_ (values gathered)
  void hold_copies_in_buckets(DType copy_dtype);  // each held copy moved into (and made a view of) copies_
  bool holds_gathered_copy(size_t bucket, const BucketEntry& entry) const;  // its held copy is its run of copies_
  void prepare_step(const char* op, double lr, const AdamW& adamw);  // the sharded step's halves, errors under `op`
  void queue_sharded_update(const char* op, const Tensor& factor);
  void reduce_in_rank_order(size_t bucket);  // deterministic: all-to-all, rank-order sum (plain: and all-gather)

  Communicator& communicator_;
  std::vector<nn::NamedParameter> parameters_;
  DataParallelOptions options_;
  DType dtype_;         // the parameters'
  DType reduce_dtype_;  // the buckets' (options_.reduce_dtype, else dtype_)
  std::vector<Bucket> buckets_;
  std::vector<Tensor> flat_;  // one buffer per bucket (reducing in place: its small parameters', if any)
  std::vector<std::vector<BucketEntry>> packed_;  // per bucket, the runs packed into flat_ (all entries but in place)
  std::vector<std::vector<BucketEntry>> in_place_;  // per bucket, the parameters reduced where they are
  // reduces_to_owners: per bucket, where each reduce reads (a parameter's gradient, from source_offset, or the packed
  // buffer: kPacked) and the bucket offset its root writes (and the packed buffer's part starts at)
  struct OwnerPart {
    size_t parameter;
    int64_t source_offset, bucket_offset, count;
    int root;
  };
  static constexpr size_t kPacked = SIZE_MAX;
  std::vector<std::vector<OwnerPart>> owner_parts_;
  Tensor exchange_;                // deterministic: world_size blocks of the largest shard (all_to_all's receiver)
  std::vector<size_t> bucket_of_;  // by parameter
  std::unordered_map<const autograd::VariableState*, size_t> parameter_of_;
  std::vector<size_t> not_ready_;       // this step: the gradients each bucket still waits for
  size_t launched_ = 0;                 // this step: buckets whose collective is queued (0 .. launched_-1)
  std::vector<ShardSegment> segments_;  // ZeRO-1: this rank's shards, parameter by parameter
  std::vector<Tensor> values_;          // ZeRO-1: per bucket, the parameters' values (theirs are views of it)
  std::vector<Tensor> copies_;          // ZeRO-1: per bucket, the held compute copies (when gathered)
  bool gathers_copies_ = false;         // ZeRO-1: the queued step all-gathers the copies, settle the values
  bool values_stale_ = false;           // ZeRO-1: the values outside this rank's shards await complete_parameters
  std::vector<Tensor> m_, v_;           // ZeRO-1: AdamW moments of this rank's shard of each bucket
  Tensor terms_;                        // ZeRO-1: the queued step's AdamW scalars, on the device
  std::vector<ops::AdamWConfig> step_configs_;  // ZeRO-1: the queued step's, by segment
  bool step_queued_ = false;            // ZeRO-1: a queue_sharded_step not yet settled
  std::optional<uint64_t> queued_rounding_seed_;  // its stochastic rounding
  std::vector<Tensor> held_copies_;               // the compute copies it dropped, for settle_sharded_step
  int64_t step_count_ = 0;
};

// Returns once every rank of the group has called it (RankFailureError after the communicator's timeout).
void barrier(Communicator& communicator);

// What a checkpoint's optimizer state depends on. A run resumes only under the layout it was saved with:
// check_resume raises ConfigError naming the first difference (world size first).
struct ParallelLayout {
  int world_size = 1;
  bool zero1 = false;
  int64_t bucket_bytes = 0;  // only matters under ZeRO-1 (the shards follow the buckets)
  nlohmann::json to_json() const;
  static ParallelLayout from_json(const nlohmann::json& j);  // a missing object: one rank, no ZeRO-1
};
void check_resume(const ParallelLayout& saved, const ParallelLayout& now);

}  // namespace alpha::distributed
