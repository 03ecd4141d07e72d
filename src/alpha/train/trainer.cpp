#include "alpha/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <tuple>

#include "alpha/autograd/functions.h"
#include "alpha/core/fault.h"
#include "alpha/core/file_io.h"
#include "alpha/data/loader.h"
#include "alpha/data/prepare.h"
#include "alpha/distributed/data_parallel.h"
#include "alpha/nn/sampling.h"
#include "alpha/ops/index_check.h"
#include "alpha/ops/matmul.h"
#include "alpha/ops/optim.h"
#include "alpha/tensor/cuda_graph.h"
#include "alpha/train/checkpoint.h"
#include "alpha/train/loss_scaler.h"
#include "alpha/train/optimizer.h"
#include "alpha/train/optimizer_shards.h"
#include "alpha/train/profiler.h"
#include "alpha/train/schedule.h"
#include "alpha/train/telemetry.h"

namespace alpha::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOp = "train";
constexpr const char* kTokenizerFile = "tokenizer.model";
// The built-in corpus's word lists support about 1400 tokenizer pieces; a larger model vocabulary
// simply leaves rows unused.
constexpr int kBuiltinVocabCap = 1024;

std::vector<std::string> shards_with_prefix(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> paths;
  if (!fs::is_directory(dir)) return paths;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with(prefix) && name.ends_with(".bin")) paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

bool is_prepared_folder(const fs::path& dir) {
  return fs::is_directory(dir) && fs::exists(dir / kTokenizerFile) && !shards_with_prefix(dir, "train_").empty();
}

// Copies named tensors into a module's parameters by name; every parameter must be present with its shape.
void restore_parameters(const std::vector<nn::NamedParameter>& parameters,
                        const std::vector<std::pair<std::string, Tensor>>& saved, const fs::path& source) {
  if (saved.size() != parameters.size())
    raise<ConfigError>("load_model", source.string(), std::to_string(parameters.size()) + " weight tensors",
                       std::to_string(saved.size()));
  for (const auto& p : parameters) {
    auto it = std::find_if(saved.begin(), saved.end(), [&](const auto& s) { return s.first == p.name; });
    if (it == saved.end()) raise<ConfigError>("load_model", source.string(), "a tensor named " + p.name, "none");
    if (it->second.shape() != p.variable.shape())
      raise<ConfigError>("load_model", p.name, "shape " + shape_str(p.variable.shape()), shape_str(it->second.shape()));
    autograd::Variable v = p.variable;
    v.mutable_value().copy_from(it->second);
  }
}

// Keeps the metrics lines of the steps a checkpoint holds, so a resumed run's log has no step twice.
void truncate_metrics(const fs::path& run_dir, int64_t steps_done) {
  fs::path path = run_dir / "metrics.jsonl";
  if (!fs::exists(path)) return;
  std::istringstream lines(read_file(path, kOp));
  std::string line, kept;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_discarded() && record.value("step", int64_t(0)) <= steps_done) kept += line + "\n";
  }
  write_file_atomic(path, kept, kOp);
}

// "nan", "inf", "-inf" or %g: the C library may print a NaN as "-nan".
std::string number_text(double value) {
  if (std::isnan(value)) return "nan";
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// Test-only (ALPHA_FAULT_NAN_STEPS / ALPHA_FAULT_INF_STEPS, alpha/core/fault.h): writes NaN or Inf into the
// first row of the first parameter's gradient at the chosen steps.
void inject_gradient_fault(const nn::GPT& model, int64_t step) {
  std::optional<double> poison = fault::gradient_poison(step);
  if (!poison) return;
  std::vector<nn::NamedParameter> parameters = model.named_parameters();
  if (parameters.empty() || !parameters.front().variable.grad().defined()) return;
  Tensor grad = parameters.front().variable.grad();
  Tensor row = grad.dim() > 0 ? grad.slice(0, 0, 1) : grad;
  row.copy_from(Tensor::full(row.shape(), *poison, row.dtype(), row.device()));
}

}  // namespace

struct Trainer::Data {
  std::optional<data::Tokenizer> tokenizer;  // set by prepare_data
  std::unique_ptr<data::Loader> train;
  std::unique_ptr<data::Loader> val;  // null without validation shards
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<WarmupCosineSchedule> schedule;
  std::unique_ptr<MetricsWriter> metrics;  // rank 0 only
  std::unique_ptr<distributed::DataParallel> parallel;  // with a communicator
  std::unique_ptr<LossScaler> scaler;                    // with loss scaling (f16 by default)
  // With cuda_graphs, once captured: the device tensors the step reads (the batch, which the host writes before
  // each replay) and leaves (the loss as a one-element f32 vector, the scaled gradient norm), and the graph.
  struct CapturedStep {
    std::vector<Tensor> ids, targets;  // one per micro-step
    Tensor losses, norm;
    std::unique_ptr<CudaGraph> graph;
  };
  std::optional<CapturedStep> captured;
};

namespace {

int rank_of(const TrainerOptions& o) { return o.communicator ? o.communicator->rank() : 0; }

// The step --profile asks for (0: none), checked against the steps this run makes, (first, last]. Every rank
// knows it (the ranks line up before it); rank 0 alone profiles it.
int64_t resolved_profile_step(const TrainerOptions& o, int64_t first, int64_t last) {
  if (!o.profile || last <= first) return 0;
  if (o.profile_step == 0) return std::min(first + 3, last);
  if (o.profile_step <= first || o.profile_step > last)
    raise<ValueError>(kOp, "--profile-step",
                      "a step this run makes, " + std::to_string(first + 1) + " to " + std::to_string(last),
                      std::to_string(o.profile_step));
  return o.profile_step;
}
int world_of(const TrainerOptions& o) { return o.communicator ? o.communicator->world_size() : 1; }
bool sharded(const TrainerOptions& o) { return o.communicator && o.train.zero1; }

distributed::ParallelLayout layout_of(const TrainerOptions& o) {
  return {world_of(o), sharded(o), sharded(o) ? o.train.bucket_mb << 20 : 0};
}

// The seed of stochastic rounding's bits, from the model seed (none without stochastic rounding). Its Philox
// substreams (kernels/optim.h) are never dropout's, whatever the seeds.
std::optional<uint64_t> rounding_seed(const TrainerOptions& o) {
  constexpr uint64_t kStochasticRoundingStream = 0x73746f6368617374;  // "stochast"
  if (!o.train.stochastic_rounding) return std::nullopt;
  return nn::derive_seed(o.model.seed, kStochasticRoundingStream);
}

// ZeRO-1's AdamW settings, the trainer's.
distributed::DataParallel::AdamW sharded_adamw(const TrainerOptions& o) {
  const TrainConfig& t = o.train;
  return {t.beta1, t.beta2, t.adam_eps, t.weight_decay, rounding_seed(o)};
}

// One micro-step: the forward of (ids, targets), then the backward of its loss times loss_factor (the loss scale
// over the micro-steps; no op for 1). Its loss as the forward gave it, on the device, and the host time of each.
struct MicroStep {
  Tensor loss;
  double forward_s, backward_s;
};
MicroStep micro_step(const nn::GPT& model, const Tensor& ids, const Tensor& targets, const nn::ForwardOptions& fo,
                     double loss_factor, const autograd::LeafReadyFn& on_leaf_ready = {}) {
  Stopwatch phase;
  autograd::Variable loss = model.forward(ids, targets, fo).loss;
  MicroStep out{loss.value(), 0, 0};
  if (loss_factor != 1.0) loss = autograd::scale(loss, loss_factor);
  out.forward_s = phase.seconds();
  phase.restart();
  autograd::backward(loss, {}, on_leaf_ready);
  out.backward_s = phase.seconds();
  return out;
}

// The micro-steps' losses in one device vector of `dtype`, in micro-step order (one copy_many launch).
Tensor stacked_losses(std::vector<Tensor> micro_losses, DType dtype, Device device) {
  Tensor losses = Tensor::empty({int64_t(micro_losses.size())}, dtype, device);
  std::vector<Tensor> slots;
  for (int64_t micro = 0; micro < losses.numel(); ++micro) slots.push_back(losses.slice(0, micro, micro + 1));
  for (Tensor& micro_loss : micro_losses) micro_loss = micro_loss.reshape({1}).to(dtype);
  copy_many(slots, micro_losses);
  return losses;
}

}  // namespace

SavedConfigs saved_configs(const fs::path& run_dir) {
  auto latest = latest_checkpoint(run_dir);
  if (!latest)
    raise<ConfigError>(kOp, "--resume", "a run directory with a checkpoint", "none in '" + run_dir.string() + "'");
  nlohmann::json state = nlohmann::json::parse(read_file(*latest / "state.json", kOp));
  return {state.at("model_config"), state.at("train_config")};
}

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)), data_(std::make_unique<Data>()) {
  options_.model.validate();
  options_.train.validate();
  // What a captured step cannot replay that TrainConfig alone does not know, refused before any work.
  if (options_.train.cuda_graphs && options_.model.dropout > 0)
    raise<ConfigError>(kOp, "cuda_graphs",
                       "false with dropout > 0 (its masks are drawn per step from a seed passed by value)", "true");
  Device device = Device::parse(options_.train.device, "device");
  const int rank = rank_of(options_);
  if (options_.communicator) {
    if (device.is_cuda()) device = options_.communicator->device();  // each rank drives its own GPU
    options_.echo = options_.echo && rank == 0;
  }
  fs::create_directories(options_.run_dir);
  // Rank 0 prepares the data while the others wait; then they read what it wrote.
  if (rank == 0) prepare_data();
  if (options_.communicator) distributed::barrier(*options_.communicator);
  if (rank != 0) prepare_data();
  // Parameters (the master weights) and optimizer state stay f32; bf16 and f16 precision compute in them.
  std::optional<DType> compute_dtype;
  if (options_.train.precision == "bf16") compute_dtype = DType::bf16;
  if (options_.train.precision == "f16") compute_dtype = DType::f16;
  ops::set_allow_tf32(options_.train.tf32);
  model_ = std::make_unique<nn::GPT>(options_.model, DType::f32, device, compute_dtype);

  const TrainConfig& t = options_.train;
  std::vector<nn::NamedParameter> parameters = model_->named_parameters();
  if (!t.hold_compute_copies)
    for (auto& p : parameters) p.variable.set_holds_compute_copy(false);
  if (t.decay_embeddings)
    for (auto& p : parameters) p.decay |= p.name == "wte.weight" || p.name == "wpe.weight";
  // Under ZeRO-1 the optimizer state lives in DataParallel's shards, and AdamW holds no parameters.
  data_->optimizer = std::make_unique<AdamW>(sharded(options_) ? std::vector<nn::NamedParameter>{} : parameters,
                                             AdamWOptions{t.beta1, t.beta2, t.adam_eps, t.weight_decay,
                                                          rounding_seed(options_)});
  if (options_.communicator)
    data_->parallel = std::make_unique<distributed::DataParallel>(
        *options_.communicator, parameters,
        distributed::DataParallelOptions{t.bucket_mb << 20, t.zero1, t.deterministic_reduce,
                                         t.reduce_precision == "bf16" ? std::optional(DType::bf16) : std::nullopt});
  if (t.scales_loss())
    data_->scaler = std::make_unique<LossScaler>(LossScalerOptions{t.loss_scale, t.loss_scale_growth_interval});
  data_->schedule = std::make_unique<WarmupCosineSchedule>(t.lr, t.min_lr, t.effective_warmup_steps(), t.effective_decay_steps());
  if (options_.resume) resume_from_checkpoint();
  if (rank != 0) return;
  data_->metrics = std::make_unique<MetricsWriter>(options_.run_dir, options_.resume);

  nlohmann::json run_config = {{"model", options_.model.to_json()}, {"train", t.to_json()}};
  write_file_atomic(options_.run_dir / "config.json", run_config.dump(2) + "\n", kOp);
}

Trainer::~Trainer() = default;

void Trainer::prepare_data() {
  fs::path data_dir = options_.run_dir / "data";
  const auto& inputs = options_.data;
  bool prepared_input = inputs.size() == 1 && is_prepared_folder(inputs[0]);
  if (prepared_input) {
    data_dir = inputs[0];
  } else if (rank_of(options_) == 0 && !(options_.resume && is_prepared_folder(data_dir))) {
    data::PrepareOptions prep;
    prep.out_dir = data_dir.string();
    prep.val_fraction = options_.train.val_fraction;
    if (inputs.empty()) {
      prep.builtin_corpus = true;
      prep.vocab_size = int(std::min<int64_t>(options_.model.vocab_size, kBuiltinVocabCap));
    } else {
      prep.inputs = inputs;
      prep.vocab_size = int(std::min<int64_t>(options_.model.vocab_size, data::kMaxVocabSize));
    }
    if (options_.echo) std::printf("preparing data in %s\n", data_dir.c_str());
    data::prepare(prep);
  }
  data_->tokenizer = data::Tokenizer::load((data_dir / kTokenizerFile).string());
  int vocab = data_->tokenizer->vocab_size();
  if (vocab > options_.model.vocab_size)
    raise<ConfigError>(kOp, "vocab_size", ">= the tokenizer's vocabulary " + std::to_string(vocab),
                       std::to_string(options_.model.vocab_size));

  const TrainConfig& t = options_.train;
  data::LoaderOptions lo;
  lo.batch_size = t.batch_size;
  lo.seq_len = t.effective_seq_len(options_.model.block_size);
  if (lo.seq_len > options_.model.block_size)
    raise<ConfigError>(kOp, "seq_len", "<= block_size " + std::to_string(options_.model.block_size),
                       std::to_string(lo.seq_len));
  lo.vocab_size = vocab;
  lo.seed = t.data_seed;
  lo.rank = rank_of(options_);
  lo.world_size = world_of(options_);
  lo.micro_steps = t.grad_accum;
  data_->train = std::make_unique<data::Loader>(shards_with_prefix(data_dir, "train_"), lo);
  lo.rank = 0;  // every rank validates on the same batches
  lo.world_size = 1;
  lo.micro_steps = 1;
  std::vector<std::string> val_shards = shards_with_prefix(data_dir, "val_");
  if (!val_shards.empty() && t.eval_every > 0) {
    lo.shuffle = false;
    lo.batch_size = 1;  // validation sets are small: one sequence per batch keeps even short ones usable
    data_->val = std::make_unique<data::Loader>(val_shards, lo);
  }
}

void Trainer::resume_from_checkpoint() {
  const int rank = rank_of(options_);
  if (rank == 0) remove_checkpoint_leftovers(options_.run_dir);  // of a save that crashed (docs/CHECKPOINTS.md)
  CheckpointData ckpt = load_checkpoint(options_.run_dir);
  distributed::check_resume(distributed::ParallelLayout::from_json(ckpt.state.value("parallel", nlohmann::json())),
                            layout_of(options_));
  restore_parameters(model_->named_parameters(), ckpt.weights, options_.run_dir);
  steps_done_ = ckpt.state.at("step").get<int64_t>();
  if (sharded(options_)) {
    OptimizerShard shard = read_optimizer_shard(options_.run_dir, steps_done_, rank, world_of(options_));
    data_->parallel->load_shard_state(shard.tensors, shard.optimizer_step);
  } else {
    std::vector<NamedTensor> moments;
    for (auto& [name, tensor] : ckpt.optimizer) moments.push_back({name, tensor});
    data_->optimizer->load_state(moments, ckpt.state.at("optimizer_step").get<int64_t>());
  }
  // The compute copies the run held: its last step's stochastic rounding of the weights just restored.
  if (const std::optional<uint64_t> seed = rounding_seed(options_))
    keep_stochastic_compute_copies(model_->named_parameters(), model_->compute_dtype(), *seed,
                                   sharded(options_) ? data_->parallel->step_count() : data_->optimizer->step_count());
  data_->train->seek(ckpt.state.at("data").get<data::LoaderPosition>());
  if (data_->scaler && ckpt.state.contains("loss_scaler")) data_->scaler->load_state(ckpt.state["loss_scaler"]);
  if (rank == 0) truncate_metrics(options_.run_dir, steps_done_);
}

double Trainer::validation_loss() {
  // ZeRO-1's values, which its steps leave stale: a collective, so before anything that differs between ranks.
  if (data_->parallel) data_->parallel->complete_parameters();
  if (!data_->val) return std::nan("");
  autograd::NoGradGuard no_grad;
  data_->val->seek({0, 0});
  int64_t batches = std::min(options_.train.eval_batches, data_->val->batches_per_epoch());
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    data::Batch b = data_->val->next();
    total += model_->forward(b.inputs, b.targets).loss.value().item();
  }
  return total / double(batches);
}

std::pair<double, double> Trainer::graphed_step(int64_t step, double lr, nn::Recompute recompute) {
  const Device device = model_->device();
  const int64_t micro_steps = options_.train.grad_accum;
  distributed::DataParallel* parallel = data_->parallel.get();  // null for one process
  std::vector<data::Batch> batches;
  for (int64_t micro = 0; micro < micro_steps; ++micro) {
    batches.push_back(data_->train->next());
    // Checked here, where the loader made them: the captured forward reads none of them back.
    const int64_t vocab = options_.model.vocab_size;
    ops::check_index_range(kOp, "ids", batches.back().inputs.contiguous(), vocab, "position");
    ops::check_index_range(kOp, "targets", batches.back().targets.contiguous(), vocab, "position");
  }
  prepare_update(lr);
  auto& captured = data_->captured;
  if (!captured) {  // kept only once the capture has succeeded
    Data::CapturedStep fresh;
    for (const data::Batch& batch : batches) {
      fresh.ids.push_back(Tensor::empty(batch.inputs.shape(), DType::i32, device));
      fresh.targets.push_back(Tensor::empty(batch.targets.shape(), DType::i32, device));
    }
    // What run() queues for a step without the graph (the same bits): the micro-steps, the norm, the guard and
    // the update; data parallel, the gradients' collectives launched from backward and the losses' gather too
    // (ZeRO-1: the norm's all-reduce and the weights' all-gathers), which the graph replays on the device's stream.
    // The step number the forward takes selects dropout masks, which cuda_graphs excludes.
    fresh.graph = std::make_unique<CudaGraph>(device, [&] {
      std::vector<Tensor> micro_losses;
      for (int64_t micro = 0; micro < micro_steps; ++micro) {
        const nn::ForwardOptions fo{true, uint64_t(step), uint64_t(micro), recompute, /*inputs_checked=*/true};
        const bool last_micro = micro + 1 == micro_steps;
        micro_losses.push_back(micro_step(*model_, fresh.ids[size_t(micro)], fresh.targets[size_t(micro)], fo,
                                          1.0 / double(micro_steps),
                                          parallel && last_micro ? parallel->gradient_ready_hook() : nullptr)
                                   .loss);
      }
      fresh.losses = parallel ? parallel->queue_reduction(stacked_losses(micro_losses, DType::f32, device))
                              : stacked_losses(micro_losses, accumulation_dtype(micro_losses[0].dtype()), device);
      fresh.norm = queue_norm();
      queue_update(ops::step_guard(fresh.norm, fresh.losses, 1.0, options_.train.grad_clip));
    });
    captured = std::move(fresh);
  }
  for (size_t micro = 0; micro < batches.size(); ++micro) {
    captured->ids[micro].copy_from(batches[micro].inputs);
    captured->targets[micro].copy_from(batches[micro].targets);
  }
  captured->graph->replay();
  // Within the timeout, naming a failed peer: the collectives run inside the replay, and a host read of the
  // device alone would wait for a dead peer forever.
  if (parallel) options_.communicator->synchronize_device();
  const std::vector<Tensor> host = HostCopy({captured->losses, captured->norm}).wait();
  double loss_sum = 0;
  for (double micro_loss : host[0].to(DType::f64).to_vector<double>()) loss_sum += micro_loss;  // in micro-step order
  return {loss_sum, host[1].item()};
}

Tensor Trainer::queue_norm() {
  return sharded(options_) ? data_->parallel->queue_sharded_norm() : data_->optimizer->grad_norm_tensor();
}

void Trainer::prepare_update(double lr) {
  if (sharded(options_))
    data_->parallel->prepare_sharded_step(lr, sharded_adamw(options_));
  else
    data_->optimizer->prepare_step(lr);
}

void Trainer::queue_update(const Tensor& factor) {
  if (sharded(options_))
    data_->parallel->queue_sharded_update(factor);
  else
    data_->optimizer->queue_update(factor);
}

void Trainer::save(int64_t steps_done) {
  // Under ZeRO-1 every rank writes its optimizer shard first, so the checkpoint `latest` will name has all, and
  // the values its steps left stale are gathered.
  if (sharded(options_)) {
    data_->parallel->complete_parameters();
    write_optimizer_shard(options_.run_dir, steps_done, rank_of(options_), world_of(options_),
                          {data_->parallel->shard_state(), data_->parallel->step_count()});
    distributed::barrier(*options_.communicator);
  }
  if (rank_of(options_) != 0) return;
  CheckpointData ckpt;
  for (const auto& p : model_->named_parameters()) ckpt.weights.emplace_back(p.name, p.variable.value());
  for (const auto& s : data_->optimizer->state_tensors()) ckpt.optimizer.emplace_back(s.name, s.tensor);
  ckpt.state = {{"model_config", options_.model.to_json()},
                {"train_config", options_.train.to_json()},
                {"data", data_->train->position()},
                {"rng", {{"model_seed", options_.model.seed}, {"data_seed", options_.train.data_seed}}},
                {"optimizer_step", sharded(options_) ? data_->parallel->step_count() : data_->optimizer->step_count()},
                {"parallel", layout_of(options_).to_json()}};
  if (data_->scaler) ckpt.state["loss_scaler"] = data_->scaler->state();
  save_checkpoint(options_.run_dir, steps_done, ckpt, int(options_.train.keep_last));
  if (sharded(options_)) prune_optimizer_shards(options_.run_dir);
}

std::string Trainer::run(std::optional<int64_t> stop_at_step) {
  const TrainConfig& t = options_.train;
  int64_t last = std::min(t.steps, stop_at_step.value_or(t.steps));
  Device device = model_->device();
  int64_t tokens_per_step =
      t.batch_size * t.effective_seq_len(options_.model.block_size) * t.grad_accum * world_of(options_);
  ProgressBar progress(steps_done_, last);
  if (options_.echo)
    std::printf("training %lld parameters for steps %lld..%lld (%lld tokens per step) in %s\n",
                static_cast<long long>(model_->num_parameters()), static_cast<long long>(steps_done_ + 1),
                static_cast<long long>(last), static_cast<long long>(tokens_per_step), options_.run_dir.c_str());
  if (options_.echo) std::printf("attention: %s\n", model_->attention_kernels().c_str());

  // Skipped steps in a row (non-finite loss or gradient norm), less those the loss scaler answers by halving
  // its scale: an overflow above the scale's floor is the scaler's business, not the run's.
  int64_t nonfinite_in_a_row = 0;
  int64_t last_update = steps_done_;  // the last step that updated the weights
  const nn::Recompute recompute = *nn::recompute_from_name(t.recompute);  // validated with the config
  const int64_t profile_step = resolved_profile_step(options_, steps_done_, last);
  // With cuda_graphs the first step of a run is made without the graph: it creates what a captured step reads
  // and must find in place (the compute copies of the weights, the position ids, the AdamW terms' buffer).
  bool made_a_step = false;
  for (int64_t step = steps_done_; step < last; ++step) {
    std::optional<StepProfiler> profiler;
    if (step + 1 == profile_step) {
      // The ranks start the profiled step together, so that rank 0's trace shows its own step rather than
      // its wait for a peer that its profiler's start left behind.
      if (options_.communicator) distributed::barrier(*options_.communicator);
      if (rank_of(options_) == 0) profiler.emplace(device);
    }
    CounterSnapshot counters = CounterSnapshot::take(device);
    Stopwatch clock;
    double lr = data_->schedule->lr(step), loss_sum = 0, forward_s = 0, backward_s = 0;
    // A power of two: the scaled backward's values are exact multiples of the unscaled ones.
    const double loss_scale = data_->scaler ? data_->scaler->scale() : 1.0;
    // Each micro-batch's loss stays on the device until every backward is queued: reading it waits for the
    // device, and a read here would stop the host from queuing backward while the forward runs.
    std::vector<Tensor> micro_losses;
    const bool graphed = t.cuda_graphs && made_a_step && !profiler;
    made_a_step = true;
    for (int64_t micro = 0; micro < (graphed ? 0 : t.grad_accum); ++micro) {
      Stopwatch data_clock;
      data::Batch batch = data_->train->next();
      forward_s += data_clock.seconds();
      // In the last micro-step each gradient bucket is reduced as soon as backward completes it.
      const bool last_micro = micro + 1 == t.grad_accum;
      const MicroStep done =
          micro_step(*model_, batch.inputs, batch.targets, {true, uint64_t(step), uint64_t(micro), recompute},
                     loss_scale / double(t.grad_accum),
                     data_->parallel && last_micro ? data_->parallel->gradient_ready_hook() : nullptr);
      micro_losses.push_back(done.loss);
      forward_s += done.forward_s;
      backward_s += done.backward_s;
    }
    // Data parallel: the micro-batches' losses in one device vector, gathered from every rank beside the
    // gradients' reduction: every rank sums the same values in the same order (the global batch's) and then
    // skips the step, or not, together.
    Tensor gathered_losses;
    if (data_->parallel && !graphed)  // a replay gathers them itself
      gathered_losses = data_->parallel->queue_reduction(stacked_losses(micro_losses, DType::f32, device));
    inject_gradient_fault(*model_, step + 1);  // test-only, off unless ALPHA_FAULT_* is set
    Stopwatch phase;  // the optimizer's host time: queueing its work, then settling the step after the wait
    double scaled_norm = 0, optimizer_s = 0;
    if (graphed) {
      std::tie(loss_sum, scaled_norm) = graphed_step(step, lr, recompute);
      forward_s = phase.seconds();  // the whole step: its replay and the read of its numbers
      phase.restart();
    } else {
      // The norm, the step's gradient factor (clipping and unscaling, NaN for a non-finite loss or norm:
      // ops::step_guard) and the optimizer step are all queued before the host reads the losses and the norm,
      // and that read waits for the norm only. The host takes in the step's numbers and queues the next step's
      // forward while the optimizer step runs, instead of the device waiting for it in between. Data parallel,
      // all of it is queued behind the gradients' collectives (ZeRO-1: the norm's all-reduce too, and the
      // update is followed by the weights' all-gather), and the host waits for the collectives the step's numbers
      // come from (within the timeout, naming a failed peer) before it reads; ZeRO-1's all-gather runs on.
      const Tensor queued_norm = queue_norm();
      const Tensor losses = data_->parallel
                                ? gathered_losses
                                : stacked_losses(micro_losses, accumulation_dtype(micro_losses[0].dtype()), device);
      HostCopy read({losses, queued_norm});
      const Tensor factor = ops::step_guard(queued_norm, losses, loss_scale, t.grad_clip);
      prepare_update(lr);
      queue_update(factor);
      optimizer_s = phase.seconds();
      if (data_->parallel) data_->parallel->synchronize_step();
      const std::vector<Tensor> host = read.wait();
      phase.restart();
      // In micro-step order (data parallel: rank by rank, the global batch's order), summed in f64.
      for (double micro_loss : host[0].to(DType::f64).to_vector<double>()) loss_sum += micro_loss;
      scaled_norm = host[1].item();
    }
    if (data_->parallel) loss_sum /= double(world_of(options_));  // every rank's micro-batches were summed
    // A NaN or Inf in the loss or the gradients skips the step: no parameter or optimizer-state update.
    const double norm = scaled_norm / loss_scale;  // exact: a power of two
    const bool skipped = !std::isfinite(norm) || !std::isfinite(loss_sum);
    const bool scaler_backs_off = data_->scaler && skipped && std::isfinite(loss_sum) && !data_->scaler->at_floor();
    if (data_->scaler) data_->scaler->update(!skipped);
    if (!skipped) nonfinite_in_a_row = 0;
    else if (!scaler_backs_off) ++nonfinite_in_a_row;
    ClipResult clip{norm, skipped ? std::nan("") : 1.0};
    // The device skipped the step, or not, by the same test.
    if (sharded(options_))
      data_->parallel->settle_sharded_step(!skipped);
    else
      data_->optimizer->settle(!skipped);
    if (!skipped) clip = AdamW::clip_result(loss_scale, t.grad_clip, scaled_norm);
    data_->optimizer->clear_grads();
    optimizer_s += phase.seconds();
    double step_s = clock.seconds();
    StepCounters used = StepCounters::since(counters, device);
    steps_done_ = step + 1;
    if (profiler) {
      nlohmann::json report = profiler->finish({steps_done_, forward_s, backward_s, optimizer_s});
      profiler.reset();
      write_file_atomic(options_.run_dir / "profile.json", report.dump(2) + "\n", kOp);
      if (options_.echo) {
        progress.finish();
        std::printf("%s(all of it in %s)\n", profile_table(report).c_str(),
                    (options_.run_dir / "profile.json").string().c_str());
        std::fflush(stdout);
      }
    }

    double loss = loss_sum / double(t.grad_accum);
    bool run_complete = steps_done_ == t.steps;
    bool evaluate = t.eval_every > 0 && (steps_done_ % t.eval_every == 0 || run_complete);
    double val_loss = evaluate ? validation_loss() : std::nan("");
    double tokens_per_second = double(tokens_per_step) / step_s;
    nlohmann::json record = {{"step", steps_done_},     {"loss", loss},
                             {"lr", lr},                {"grad_norm", clip.norm},
                             {"clip_coef", clip.clip_coef},
                             {"tokens_per_second", tokens_per_second},
                             {"step_time_s", step_s},   {"forward_s", forward_s},
                             {"backward_s", backward_s}, {"optimizer_s", optimizer_s},
                             {"ops", used.ops},         {"allocations", used.allocations},
                             {"fresh_allocations", used.fresh_allocations}, {"peak_bytes", used.peak_bytes}};
    record["val_loss"] = std::isnan(val_loss) ? nlohmann::json(nullptr) : nlohmann::json(val_loss);
    record["skipped"] = skipped;
    if (graphed) record["graph_nodes"] = data_->captured->graph->nodes();  // a replay: ops counts the host's launches
    if (data_->scaler) record["loss_scale"] = loss_scale;
    if (steps_done_ == profile_step) record["profiled"] = true;  // synchronised and traced: not a typical step
    if (!skipped) last_update = steps_done_;
    if (data_->metrics) data_->metrics->write(std::move(record));
    if (options_.echo) progress.update(steps_done_, loss, tokens_per_second);
    if (options_.echo && (evaluate || (!progress.enabled() && steps_done_ == 1))) {
      progress.finish();
      std::printf("step %5lld  loss %.4f  val_loss %s  lr %.2e  grad_norm %.3f  %.0f tok/s  ops %llu  allocs %llu "
                  "(new %llu)  peak %s mem %.1f MiB\n",
                  static_cast<long long>(steps_done_), loss, std::isnan(val_loss) ? "-" : std::to_string(val_loss).c_str(),
                  lr, clip.norm, tokens_per_second, static_cast<unsigned long long>(used.ops),
                  static_cast<unsigned long long>(used.allocations),
                  static_cast<unsigned long long>(used.fresh_allocations), device.str().c_str(),
                  double(used.peak_bytes) / (1 << 20));
      std::fflush(stdout);
    }
    if (skipped && options_.echo) {
      progress.finish();
      if (scaler_backs_off)
        std::printf("step %5lld  skipped: non-finite gradients at loss scale %g, no update; the scale is now %g\n",
                    static_cast<long long>(steps_done_), loss_scale, data_->scaler->scale());
      else
        std::printf("step %5lld  skipped: non-finite %s (loss %s, grad_norm %s), no update; %lld in a row%s\n",
                    static_cast<long long>(steps_done_), std::isfinite(loss_sum) ? "gradients" : "loss",
                    number_text(loss).c_str(), number_text(norm).c_str(),
                    static_cast<long long>(nonfinite_in_a_row),
                    t.max_nonfinite_steps > 0 ? (", the run stops at " + std::to_string(t.max_nonfinite_steps)).c_str()
                                              : "");
      std::fflush(stdout);
    }
    if (skipped && t.max_nonfinite_steps > 0 && nonfinite_in_a_row >= t.max_nonfinite_steps) {
      progress.finish();
      // The weights and optimizer state are still those of the last finite step: keep them resumable.
      if (t.save_every >= 0) save(steps_done_);
      const int64_t first_bad = last_update + 1;
      throw NumericError("[train] steps " + std::to_string(first_bad) + " to " + std::to_string(steps_done_) + ": " +
                         std::to_string(nonfinite_in_a_row) +
                         " steps in a row had a non-finite loss or gradient norm (max_nonfinite_steps " +
                         std::to_string(t.max_nonfinite_steps) +
                         (steps_done_ - last_update > nonfinite_in_a_row
                              ? "; " + std::to_string(steps_done_ - last_update - nonfinite_in_a_row) +
                                    " more were overflows the loss scaler answered"
                              : std::string()) +
                         "), training stopped; " +
                         (t.save_every >= 0
                              ? "the weights and optimizer state of step " + std::to_string(first_bad - 1) +
                                    ", the last finite step, are saved in '" +
                                    checkpoint_dir(options_.run_dir, steps_done_).string() +
                                    "' (alpha train --resume continues after the bad batches; try a lower --lr)"
                              : std::string("nothing was saved (save_every is -1); try a lower --lr")));
    }
    // A stop before the end (stop_at_step) checkpoints too, so the run can be resumed from there.
    if (t.save_every >= 0 && (steps_done_ == last || (t.save_every > 0 && steps_done_ % t.save_every == 0)))
      save(steps_done_);
  }
  progress.finish();
  if (data_->parallel) data_->parallel->complete_parameters();  // the model is the caller's now
  if (steps_done_ < t.steps || t.sample_tokens == 0 || rank_of(options_) != 0) return "";
  std::string text = sample_text(*model_, *data_->tokenizer, t.prompt, t.sample_tokens, t.temperature, t.top_k,
                                 options_.model.seed);
  // Kept beside the metrics for `alpha report`.
  write_file_atomic(options_.run_dir / "sample.txt", t.prompt + text, kOp);
  if (options_.echo) std::printf("--- sample (%lld tokens) ---\n%s%s\n---\n", static_cast<long long>(t.sample_tokens),
                                 t.prompt.c_str(), text.c_str());
  return text;
}

data::Tokenizer LoadedModel::tokenizer() const {
  return data::Tokenizer::load((run_dir / "data" / kTokenizerFile).string());
}

LoadedModel load_model(const fs::path& checkpoint) {
  CheckpointData ckpt = load_checkpoint(checkpoint);
  fs::path step_dir = fs::exists(checkpoint / "state.json") ? checkpoint : *latest_checkpoint(checkpoint);
  LoadedModel loaded;
  loaded.run_dir = step_dir.parent_path().parent_path();
  loaded.state = ckpt.state;
  loaded.model = std::make_unique<nn::GPT>(nn::GPTConfig::from_json(ckpt.state.at("model_config")));
  restore_parameters(loaded.model->named_parameters(), ckpt.weights, step_dir);
  return loaded;
}

std::string sample_text(const nn::GPT& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                        int64_t tokens, double temperature, int64_t top_k, uint64_t seed) {
  std::vector<int32_t> ids = prompt.empty() ? std::vector<int32_t>{tokenizer.eot_id()} : tokenizer.encode(prompt);
  std::vector<int32_t> generated = nn::generate(model, ids, tokens, nn::SamplingOptions{temperature, top_k, seed, tokenizer.vocab_size()});
  return tokenizer.decode(generated);
}

}  // namespace alpha::train
