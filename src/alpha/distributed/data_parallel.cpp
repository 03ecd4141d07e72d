#include "alpha/distributed/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "alpha/core/error.h"
#include "alpha/ops/elementwise.h"
#include "alpha/ops/optim.h"

namespace alpha::distributed {

namespace {

constexpr const char* kOp = "DataParallel";

void require_factor(const char* op, const Tensor& factor) {
  if (!factor.defined()) raise<ValueError>(op, "factor", "a device factor (ops::step_guard's)", "an undefined tensor");
}

std::string state_name(const char* slot, size_t bucket) {
  return std::string(slot) + "/bucket_" + std::to_string(bucket);
}

}  // namespace

void DataParallelOptions::validate() const {
  if (bucket_bytes < 1) raise<ConfigError>(kOp, "bucket_bytes", "a size in bytes >= 1", std::to_string(bucket_bytes));
  if (packed_below_bytes < 0)
    raise<ConfigError>(kOp, "packed_below_bytes", "a size in bytes >= 0", std::to_string(packed_below_bytes));
  if (reduce_dtype && *reduce_dtype != DType::bf16)
    raise<ConfigError>(kOp, "reduce_dtype", "none (the parameters' dtype) or bf16",
                       std::string(dtype_name(*reduce_dtype)));
  if (reduce_dtype && deterministic)
    raise<ConfigError>(kOp, "reduce_dtype", "none with deterministic (its sums are the parameters' dtype's)",
                       std::string(dtype_name(*reduce_dtype)));
}

std::vector<Bucket> plan_buckets(const std::vector<int64_t>& numels, size_t element_bytes, int64_t bucket_bytes,
                                 int world_size) {
  std::vector<Bucket> buckets;
  Bucket current;
  auto close = [&] {
    const int64_t unit = kShardAlignment * world_size;
    current.padded_numel = (current.numel + unit - 1) / unit * unit;
    current.shard_numel = current.padded_numel / world_size;
    buckets.push_back(std::move(current));
    current = Bucket{};
  };
  for (size_t i = numels.size(); i-- > 0;) {
    current.entries.push_back({i, current.numel, numels[i]});
    current.numel += numels[i];
    if (current.numel * int64_t(element_bytes) >= bucket_bytes) close();
  }
  if (!current.entries.empty()) close();
  return buckets;
}

std::vector<ShardSegment> shard_segments(const std::vector<Bucket>& buckets, int rank) {
  std::vector<ShardSegment> segments;
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t shard_begin = rank * buckets[b].shard_numel, shard_end = shard_begin + buckets[b].shard_numel;
    for (const auto& e : buckets[b].entries) {
      int64_t begin = std::max(shard_begin, e.offset), end = std::min(shard_end, e.offset + e.numel);
      if (begin < end) segments.push_back({b, e.parameter, begin - e.offset, begin - shard_begin, end - begin});
    }
  }
  return segments;
}

DataParallel::DataParallel(Communicator& communicator, std::vector<nn::NamedParameter> parameters,
                           DataParallelOptions options)
    : communicator_(communicator), parameters_(std::move(parameters)), options_(options) {
  options_.validate();
  if (parameters_.empty()) raise<ValueError>(kOp, "parameters", "at least one parameter", "none");
  dtype_ = parameters_[0].variable.dtype();
  require_collective_dtype(kOp, dtype_);
  std::vector<int64_t> numels;
  for (const auto& p : parameters_) {
    if (p.variable.dtype() != dtype_)
      raise<DTypeError>(kOp, p.name, "the dtype of the first parameter " + std::string(dtype_name(dtype_)),
                        std::string(dtype_name(p.variable.dtype())));
    if (p.variable.value().device() != communicator_.device())
      raise<DeviceError>(kOp, p.name, "a parameter on the communicator's device " + communicator_.device().str(),
                         p.variable.value().device().str());
    numels.push_back(p.variable.value().numel());
  }
  int world = communicator_.world_size();
  buckets_ = plan_buckets(numels, dtype_size(dtype_), options_.bucket_bytes, world);
  bucket_of_.resize(parameters_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (const auto& e : buckets_[b].entries) bucket_of_[e.parameter] = b;
    not_ready_.push_back(buckets_[b].entries.size());
  }
  for (size_t i = 0; i < parameters_.size(); ++i) parameter_of_[parameters_[i].variable.state().get()] = i;
  reduce_dtype_ = options_.reduce_dtype.value_or(dtype_);
  // Deterministic: the buckets and the exchange are the communicator's gather buffers, which NCCL's copy engines can
  // move. One exchange serves every bucket: a bucket's sum, queued in the collectives' order, has read it before the
  // next bucket's all-to-all writes it.
  // Reducing in place, only the parameters smaller than packed_below_bytes are packed, into a buffer of their own;
  // reducing to the owners, they are packed at their offsets in the bucket's buffer; otherwise all are (packed in
  // order from 0, as here).
  const int64_t pack_below =
      reduces_in_place() || reduces_to_owners() ? options_.packed_below_bytes : std::numeric_limits<int64_t>::max();
  int64_t largest_shard = 0;
  for (const auto& b : buckets_) {
    largest_shard = std::max(largest_shard, b.shard_numel);
    std::vector<BucketEntry> packed, in_place;
    std::vector<OwnerPart> parts;  // reducing to the owners
    int64_t packed_numel = 0, packed_run_end = -1;
    for (const auto& e : b.entries) {
      const bool from_gradient = e.numel * int64_t(dtype_size(dtype_)) >= pack_below;
      if (from_gradient) {
        in_place.push_back(e);
      } else {
        packed.push_back({e.parameter, reduces_to_owners() ? e.offset : packed_numel, e.numel});
        packed_numel += e.numel;
      }
      if (!reduces_to_owners()) continue;
      // The bucket's runs in offset order (a large gradient, or consecutive packed ones), each cut where a shard ends.
      for (int64_t at = e.offset; at < e.offset + e.numel;) {
        const int root = int(at / b.shard_numel);
        const int64_t end = std::min(e.offset + e.numel, (root + 1) * b.shard_numel);
        if (!from_gradient && packed_run_end == at && parts.back().root == root)
          parts.back().count += end - at;  // continues the packed run before it, in the same shard
        else
          parts.push_back({from_gradient ? e.parameter : kPacked, at - e.offset, at, end - at, root});
        packed_run_end = from_gradient ? -1 : end;
        at = end;
      }
    }
    if (reduces_to_owners()) owner_parts_.push_back(std::move(parts));
    packed_.push_back(std::move(packed));
    in_place_.push_back(std::move(in_place));
    if (reduces_in_place())
      flat_.push_back(packed_numel ? Tensor::zeros({packed_numel}, dtype_, communicator_.device()) : Tensor());
    else if (options_.deterministic)
      flat_.push_back(communicator_.gather_buffer(b.shard_numel, reduce_dtype_).view({b.padded_numel}));
    else
      flat_.push_back(Tensor::zeros({b.padded_numel}, reduce_dtype_, communicator_.device()));
  }
  if (options_.deterministic) exchange_ = communicator_.gather_buffer(largest_shard, reduce_dtype_).view({-1});
  if (options_.zero1) {
    segments_ = shard_segments(buckets_, communicator_.rank());
    for (const auto& b : buckets_) {
      m_.push_back(Tensor::zeros({b.shard_numel}, dtype_, communicator_.device()));
      v_.push_back(Tensor::zeros({b.shard_numel}, dtype_, communicator_.device()));
      values_.push_back(Tensor::zeros({b.padded_numel}, dtype_, communicator_.device()));
    }
    // The values move into the buckets' buffers, each parameter's becoming a view of its run, so the step's
    // all-gather lands in the model. A held copy stays: the values it was converted from are unchanged.
    std::vector<Tensor> runs, current;
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (const auto& e : buckets_[b].entries) {
        runs.push_back(run_of(values_[b], e));
        current.push_back(parameters_[e.parameter].variable.value().view({-1}));  // (mutable_value drops copies)
      }
    copy_many(runs, current);
    size_t run = 0;
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (const auto& e : buckets_[b].entries) {
        autograd::Variable v = parameters_[e.parameter].variable;
        Tensor held = v.compute_copy();
        v.mutable_value() = runs[run++].view(v.shape());
        if (held.defined()) v.keep_compute_copy(std::move(held));
      }
  }
}

Tensor DataParallel::flat_gradient(size_t parameter) const {
  const nn::NamedParameter& p = parameters_[parameter];
  if (!p.variable.grad().defined())
    raise<ValueError>("DataParallel::queue_reduction", p.name, "a parameter with a gradient (run backward first)",
                      "none");
  return p.variable.grad().view({-1});
}

Tensor DataParallel::shard_of(const Tensor& buffer, size_t bucket) const {
  int64_t n = buckets_[bucket].shard_numel, first = communicator_.rank() * n;
  return buffer.slice(0, first, first + n);
}

void DataParallel::all_gather_shard(const Tensor& buffer, size_t bucket) {
  communicator_.all_gather(shard_of(buffer, bucket).raw_data(), buffer.raw_data(), size_t(buckets_[bucket].shard_numel),
                           buffer.dtype());
}

Tensor DataParallel::run_of(const Tensor& buffer, const BucketEntry& entry) {
  return buffer.slice(0, entry.offset, entry.offset + entry.numel);
}

bool DataParallel::reduces_in_place() const {
  return !options_.zero1 && !options_.deterministic && !options_.reduce_dtype;
}

bool DataParallel::reduces_to_owners() const {
  return options_.zero1 && !options_.deterministic && !options_.reduce_dtype;
}

bool DataParallel::read_where_it_is(const Tensor& gradient) const { return gradient.dtype() == dtype_; }

void DataParallel::reduce_to_owners(size_t b) {
  const size_t element = dtype_size(dtype_);
  char* flat = static_cast<char*>(flat_[b].raw_data());
  std::vector<Communicator::ReducePart> parts;
  for (const OwnerPart& part : owner_parts_[b]) {
    char* at = flat + part.bucket_offset * int64_t(element);  // the root's place in its shard
    const void* send = at;
    if (part.parameter != kPacked) {
      const Tensor g = flat_gradient(part.parameter);
      if (read_where_it_is(g)) send = static_cast<const char*>(g.raw_data()) + part.source_offset * int64_t(element);
    }
    parts.push_back({send, at, size_t(part.count), part.root});
  }
  communicator_.reduce_many(parts, dtype_, ReduceOp::average);
}

void DataParallel::launch_bucket(size_t b) {
  std::vector<Tensor> slices, grads;
  for (const auto& e : packed_[b]) {
    slices.push_back(run_of(flat_[b], e));
    grads.push_back(flat_gradient(e.parameter));
  }
  if (reduces_to_owners())  // the large gradients not read where they are are packed (converted) at their place
    for (const auto& e : in_place_[b])
      if (Tensor g = flat_gradient(e.parameter); !read_where_it_is(g)) {
        slices.push_back(run_of(flat_[b], e));
        grads.push_back(g);
      }
  // One launch on a GPU, not one per parameter, in the device's stream: copies on the communicator's stream
  // (cudaMemcpyAsync, one per parameter) measured slower, 2026-11-29 (docs/PERFORMANCE.md).
  if (!slices.empty()) copy_many(slices, grads);
  if (reduces_in_place()) {
    std::vector<Communicator::Buffer> buffers;
    if (flat_[b].defined()) buffers.push_back({flat_[b].raw_data(), size_t(flat_[b].numel()), dtype_});
    for (const auto& e : in_place_[b]) {
      Tensor g = flat_gradient(e.parameter);
      buffers.push_back({g.raw_data(), size_t(g.numel()), g.dtype()});
    }
    communicator_.all_reduce_many(buffers, ReduceOp::average);
    return;
  }
  if (options_.deterministic)
    reduce_in_rank_order(b);
  else if (reduces_to_owners())
    reduce_to_owners(b);
  else if (options_.zero1)
    communicator_.reduce_scatter(flat_[b].raw_data(), shard_of(flat_[b], b).raw_data(), size_t(buckets_[b].shard_numel),
                                 reduce_dtype_, ReduceOp::average);
  else
    communicator_.all_reduce(flat_[b].raw_data(), size_t(buckets_[b].padded_numel), reduce_dtype_, ReduceOp::average);
}

void DataParallel::on_gradient_ready(const autograd::VariableState& leaf) {
  auto it = parameter_of_.find(&leaf);
  if (it == parameter_of_.end()) return;  // a leaf that is not one of the parameters (an input)
  size_t b = bucket_of_[it->second];
  if (not_ready_[b] > 0) --not_ready_[b];
  // In bucket order, so that every rank queues the same collectives in the same order.
  while (launched_ < buckets_.size() && not_ready_[launched_] == 0) launch_bucket(launched_++);
}

autograd::LeafReadyFn DataParallel::gradient_ready_hook() {
  return [this](const autograd::VariableState& leaf) { on_gradient_ready(leaf); };
}

Tensor DataParallel::queue_reduction(const Tensor& step_losses) {
  constexpr const char* op = "DataParallel::queue_reduction";
  if (step_losses.defined()) {
    if (step_losses.dtype() != DType::f32 || step_losses.dim() != 1 || !step_losses.is_contiguous())
      raise<ValueError>(op, "step_losses", "a contiguous f32 vector", step_losses.describe());
    if (step_losses.device() != communicator_.device())
      raise<DeviceError>(op, "step_losses", "a tensor on the communicator's device " + communicator_.device().str(),
                         step_losses.device().str());
  }
  // Buckets the backward did not complete (no hook, or gradients that never arrived) go now; on a GPU
  // packing one overlaps the collective of the one before.
  while (launched_ < buckets_.size()) launch_bucket(launched_++);
  Tensor gathered_losses;
  if (step_losses.defined()) {
    gathered_losses =
        Tensor::empty({communicator_.world_size() * step_losses.numel()}, DType::f32, communicator_.device());
    communicator_.all_gather(step_losses.raw_data(), gathered_losses.raw_data(), size_t(step_losses.numel()),
                             DType::f32);
  }
  communicator_.order_after_collectives();
  launched_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) not_ready_[b] = buckets_[b].entries.size();
  if (options_.zero1) {
    for (auto& p : parameters_) p.variable.clear_grad();  // the shards hold what the step needs
    return gathered_losses;
  }
  // The packed gradients' averages stay in the buffers: each parameter's gradient becomes its view there (no copy
  // back; under a bf16 reduction the bf16 average, which AdamW reads as it is). The next backward makes fresh
  // gradients (the optimiser releases these after its step). A gradient of another dtype than the buckets'
  // without one (a bf16 model's gradient of an f32 parameter) takes the average in its own dtype. Those reduced in
  // place are averaged already.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (const auto& e : packed_[b]) {
      autograd::Variable v = parameters_[e.parameter].variable;
      Tensor averaged = run_of(flat_[b], e).view(v.shape());
      if (v.grad().dtype() == reduce_dtype_ || options_.reduce_dtype)
        v.set_grad(std::move(averaged));
      else
        Tensor(v.grad()).copy_from(averaged);
    }
  }
  return gathered_losses;
}

void DataParallel::reduce_in_rank_order(size_t b) {
  // Every rank's shard r lands in this rank's exchange (rank q's as row q), is added there in rank order and scaled
  // into this rank's shard of the bucket, which the plain step then all-gathers in place.
  const int world = communicator_.world_size();
  const int64_t shard = buckets_[b].shard_numel;
  Tensor rows = exchange_.slice(0, 0, world * shard).view({world, shard});
  communicator_.all_to_all(flat_[b].raw_data(), rows.raw_data(), size_t(shard), reduce_dtype_);
  Tensor mine = shard_of(flat_[b], b);
  communicator_.queue_in_collective_order([&](Stream stream) { ops::sum_rows(rows, mine, 1.0 / world, stream); });
  if (!options_.zero1) all_gather_shard(flat_[b], b);
}

void DataParallel::synchronize_step() {
  communicator_.synchronize_marked();  // ZeRO-1's norm marks; with no mark (plain) it waits for everything
}

std::vector<Tensor> DataParallel::gradient_shards() const {
  if (reduces_in_place())
    raise<ConfigError>("DataParallel::gradient_shards", "zero1",
                       "a DataParallel with buckets (ZeRO-1, deterministic or reduce_dtype)",
                       "the plain one, which reduces the gradients in place");
  std::vector<Tensor> shards;
  for (size_t b = 0; b < buckets_.size(); ++b) shards.push_back(shard_of(flat_[b], b));
  return shards;
}

Tensor DataParallel::queue_sharded_norm() {
  if (!options_.zero1)
    raise<ConfigError>("DataParallel::queue_sharded_norm", "zero1", "a DataParallel built with zero1 on", "zero1 off");
  // The padding of the shards is zero, so it adds nothing to the norm.
  Tensor squares = ops::sums_of_squares(gradient_shards());
  if (options_.deterministic) {
    // Gathered rank by rank and added in that order (the slots of rank 0, then rank 1, ...), as the gradients are:
    // no sum of NCCL's, whose order depends on its algorithm.
    Tensor gathered = Tensor::empty({communicator_.world_size() * squares.numel()}, DType::f64, squares.device());
    communicator_.all_gather(squares.raw_data(), gathered.raw_data(), size_t(squares.numel()), DType::f64);
    squares = gathered;
  } else {
    communicator_.all_reduce(squares.raw_data(), size_t(squares.numel()), DType::f64, ReduceOp::sum);
  }
  communicator_.mark_issued();  // what synchronize_step waits for: not the weights' all-gather that follows
  communicator_.order_after_collectives();
  return ops::norm_of_sums_of_squares(squares);
}

bool DataParallel::holds_gathered_copy(size_t bucket, const BucketEntry& entry) const {
  // Compared by address: no slice is made for the parameters already there, every step.
  const Tensor& copy = parameters_[entry.parameter].variable.compute_copy();
  return copy.defined() && !copies_.empty() && copy.dtype() == copies_[bucket].dtype() &&
         copy.raw_data() ==
             static_cast<const char*>(copies_[bucket].raw_data()) + entry.offset * int64_t(dtype_size(copy.dtype()));
}

DType DataParallel::gathered_copy_dtype() const {
  const Tensor& first = parameters_[0].variable.compute_copy();
  if (!first.defined() || first.dtype() == dtype_ || (first.dtype() != DType::bf16 && first.dtype() != DType::f16) ||
      !ops::adamw_takes_compute_copy(dtype_, reduce_dtype_, first.dtype()))
    return dtype_;
  for (const auto& p : parameters_)
    if (!p.variable.compute_copy().defined() || p.variable.compute_copy().dtype() != first.dtype()) return dtype_;
  return first.dtype();
}

void DataParallel::hold_copies_in_buckets(DType copy_dtype) {
  if (copies_.empty() || copies_[0].dtype() != copy_dtype) {
    copies_.clear();
    for (const auto& b : buckets_)
      copies_.push_back(communicator_.gather_buffer(b.shard_numel, copy_dtype).view({b.padded_numel}));
  }
  // A copy made since the last step (the first forward's casts, a resume's) moves in; the rest already live there.
  std::vector<Tensor> runs, held;
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (const auto& e : buckets_[b].entries) {
      if (holds_gathered_copy(b, e)) continue;
      autograd::Variable v = parameters_[e.parameter].variable;
      Tensor run = run_of(copies_[b], e);
      runs.push_back(run);
      held.push_back(v.compute_copy().view({-1}));
      v.keep_compute_copy(run.view(v.shape()));
    }
  if (!runs.empty()) copy_many(runs, held);
}

void DataParallel::queue_sharded_step(double lr, const Tensor& factor, const AdamW& adamw) {
  constexpr const char* op = "DataParallel::queue_sharded_step";
  require_factor(op, factor);  // before the step is marked queued: a refused call changes nothing
  prepare_step(op, lr, adamw);
  queue_sharded_update(op, factor);
}

void DataParallel::prepare_sharded_step(double lr, const AdamW& adamw) {
  prepare_step("DataParallel::prepare_sharded_step", lr, adamw);
}

void DataParallel::queue_sharded_update(const Tensor& factor) {
  queue_sharded_update("DataParallel::queue_sharded_update", factor);
}

void DataParallel::prepare_step(const char* op, double lr, const AdamW& adamw) {
  if (!options_.zero1) raise<ConfigError>(op, "zero1", "a DataParallel built with zero1 on", "zero1 off");
  if (step_queued_)
    raise<ValueError>(op, "self", "no queued step unsettled (call settle_sharded_step first)",
                      "step " + std::to_string(step_count_ + 1) + " queued");
  if (values_stale_)  // the forward must have read the gathered copies, not a stale value converted afresh
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (const auto& e : buckets_[b].entries)
        if (!holds_gathered_copy(b, e))
          raise<ValueError>(op, parameters_[e.parameter].name,
                            "its held compute copy as the last step gathered it (its value outside this rank's "
                            "shards is stale: call complete_parameters() before replacing a parameter's copy)",
                            parameters_[e.parameter].variable.compute_copy().defined() ? "another copy" : "no copy");
  const DType copy_dtype = gathered_copy_dtype();
  gathers_copies_ = copy_dtype != dtype_;
  held_copies_.assign(parameters_.size(), Tensor());
  if (gathers_copies_) {
    hold_copies_in_buckets(copy_dtype);
  } else {
    // The values change under the held copies, which are dropped; with stochastic rounding settle_sharded_step
    // rounds them again from the gathered values (or hands them back for a skipped step).
    for (size_t k = 0; k < parameters_.size(); ++k) {
      autograd::Variable v = parameters_[k].variable;
      if (adamw.stochastic_rounding_seed && v.compute_copy().defined() && v.compute_copy().dtype() != dtype_)
        held_copies_[k] = v.compute_copy();
      v.mutable_value();
    }
  }
  step_configs_.clear();
  std::vector<Tensor> params;
  for (const auto& s : segments_) {
    params.push_back(shard_of(values_[s.bucket], s.bucket).slice(0, s.shard_offset, s.shard_offset + s.numel));
    step_configs_.push_back({lr, adamw.beta1, adamw.beta2, adamw.eps,
                             parameters_[s.parameter].decay ? adamw.weight_decay : 0.0, step_count_ + 1});
    if (gathers_copies_ && adamw.stochastic_rounding_seed)  // the whole tensor's bits, from this run's first index
      step_configs_.back().stochastic_rounding =
          ops::StochasticRounding{*adamw.stochastic_rounding_seed, uint32_t(s.parameter), s.parameter_offset};
  }
  if (!params.empty()) ops::write_adamw_step_terms(terms_, params, step_configs_);
  queued_rounding_seed_ = gathers_copies_ ? std::nullopt : adamw.stochastic_rounding_seed;
  step_queued_ = true;
}

void DataParallel::queue_sharded_update(const char* op, const Tensor& factor) {
  if (!step_queued_) raise<ValueError>(op, "self", "a step prepared by prepare_sharded_step", "none prepared");
  require_factor(op, factor);
  std::vector<Tensor> shards = gradient_shards();
  std::vector<Tensor> params, grads, ms, vs, copies;
  for (const auto& s : segments_) {
    const int64_t first = s.shard_offset, last = s.shard_offset + s.numel;
    params.push_back(shard_of(values_[s.bucket], s.bucket).slice(0, first, last));
    grads.push_back(shards[s.bucket].slice(0, first, last));
    ms.push_back(m_[s.bucket].slice(0, first, last));
    vs.push_back(v_[s.bucket].slice(0, first, last));
    copies.push_back(gathers_copies_ ? shard_of(copies_[s.bucket], s.bucket).slice(0, first, last) : Tensor());
  }
  // Bucket by bucket, each bucket's all-gather queued as soon as its update is: the gather of one runs on the
  // communicator's stream beside the update of the next. From the last bucket (the forward's first parameters,
  // the tied table among them: the largest) to the first, so that what is left to gather after the last
  // update is a small bucket. The gradients are unscaled and clipped inside the update (no pass of their own).
  const std::vector<Tensor>& gathered = gathers_copies_ ? copies_ : values_;
  size_t end = segments_.size();
  for (size_t b = buckets_.size(); b-- > 0;) {
    size_t begin = end;
    while (begin > 0 && segments_[begin - 1].bucket == b) --begin;
    if (begin < end) {  // a rank whose shard of this bucket is padding only updates nothing in it
      auto part = [&](const std::vector<Tensor>& list) {
        return std::vector<Tensor>(list.begin() + begin, list.begin() + end);
      };
      std::vector<Tensor> bucket_params = part(params), bucket_ms = part(ms), bucket_vs = part(vs),
                          bucket_copies = part(copies);
      const std::vector<ops::AdamWConfig> bucket_configs(step_configs_.begin() + begin, step_configs_.begin() + end);
      ops::adamw_step(bucket_params, part(grads), bucket_ms, bucket_vs, bucket_copies, bucket_configs, factor,
                      terms_.slice(0, int64_t(begin), int64_t(end)));
    }
    all_gather_shard(gathered[b], b);
    end = begin;
  }
  communicator_.order_after_collectives();
}

void DataParallel::settle_sharded_step(bool applied) {
  if (!step_queued_)
    raise<ValueError>("DataParallel::settle_sharded_step", "self", "a step queued by queue_sharded_step",
                      "none queued");
  step_queued_ = false;
  if (applied) ++step_count_;
  values_stale_ |= gathers_copies_ && applied;
  if (queued_rounding_seed_ && applied)
    nn::keep_stochastic_compute_copies(parameters_, held_copies_, *queued_rounding_seed_, step_count_);
  else  // the parameters kept their values, so their copies are still theirs
    for (size_t k = 0; k < parameters_.size(); ++k)
      if (held_copies_[k].defined()) autograd::Variable(parameters_[k].variable).keep_compute_copy(held_copies_[k]);
  held_copies_.clear();
}

void DataParallel::complete_parameters() {
  if (!values_stale_) return;
  for (size_t b = 0; b < buckets_.size(); ++b) all_gather_shard(values_[b], b);
  communicator_.synchronize();
  values_stale_ = false;
}

std::vector<std::pair<std::string, Tensor>> DataParallel::shard_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t b = 0; b < m_.size(); ++b) out.emplace_back(state_name("m", b), m_[b]);
  for (size_t b = 0; b < v_.size(); ++b) out.emplace_back(state_name("v", b), v_[b]);
  return out;
}

void DataParallel::load_shard_state(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t step_count) {
  constexpr const char* op = "DataParallel::load_shard_state";
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, tensor] : tensors) by_name[name] = &tensor;
  // Everything is checked before anything is copied, so a failed load leaves the state untouched.
  std::vector<std::pair<std::string, Tensor>> expected = shard_state();
  std::vector<const Tensor*> sources;
  for (const auto& [name, tensor] : expected) {
    auto it = by_name.find(name);
    if (it == by_name.end()) raise<ValueError>(op, name, "a tensor of that name in the optimizer shard", "none");
    if (it->second->shape() != tensor.shape())
      raise<ValueError>(op, name, "shape " + shape_str(tensor.shape()) + " (the same bucket_bytes and world size)",
                        shape_str(it->second->shape()));
    sources.push_back(it->second);
    by_name.erase(it);
  }
  if (!by_name.empty())
    raise<ValueError>(op, by_name.begin()->first, "only m/bucket_<b> and v/bucket_<b> of this layout",
                      "an unknown name");
  for (size_t i = 0; i < expected.size(); ++i) expected[i].second.copy_from(*sources[i]);
  step_count_ = step_count;
}

void barrier(Communicator& communicator) {
  Tensor token = Tensor::zeros({1}, DType::f32, communicator.device());
  communicator.all_reduce(token.raw_data(), 1, DType::f32, ReduceOp::sum);
  communicator.synchronize();
}

nlohmann::json ParallelLayout::to_json() const {
  return {{"world_size", world_size}, {"zero1", zero1}, {"bucket_bytes", bucket_bytes}};
}

ParallelLayout ParallelLayout::from_json(const nlohmann::json& j) {
  ParallelLayout layout;
  if (!j.is_object()) return layout;
  layout.world_size = j.value("world_size", 1);
  layout.zero1 = j.value("zero1", false);
  layout.bucket_bytes = j.value("bucket_bytes", int64_t(0));
  return layout;
}

void check_resume(const ParallelLayout& saved, const ParallelLayout& now) {
  constexpr const char* op = "resume";
  if (saved.world_size != now.world_size)
    raise<ConfigError>(op, "world size",
                       "the checkpoint's world size " + std::to_string(saved.world_size) +
                           " (resume with as many ranks: --gpus " + std::to_string(saved.world_size) + ")",
                       std::to_string(now.world_size) + " ranks");
  if (saved.zero1 != now.zero1)
    raise<ConfigError>(op, "zero1", std::string("the checkpoint's ") + (saved.zero1 ? "true" : "false"),
                       now.zero1 ? "true" : "false");
  if (saved.zero1 && saved.bucket_bytes != now.bucket_bytes)
    raise<ConfigError>(op, "bucket_mb",
                       "the checkpoint's bucket size of " + std::to_string(saved.bucket_bytes) +
                           " bytes (the optimizer shards follow the buckets)",
                       std::to_string(now.bucket_bytes) + " bytes");
}

}  // namespace alpha::distributed
