// The training loop: data preparation for a run, AdamW with warmup-cosine learning rates, gradient
// accumulation, global-norm clipping, validation, checkpoints, telemetry and a final sample. A step whose
// loss or gradient norm is NaN or Inf is skipped and logged; max_nonfinite_steps of them in a row stop the
// run with a NumericError after a checkpoint (docs/CHECKPOINTS.md, "Non-finite steps").
//
// Determinism: parameter initialisation, data order and dropout masks are pure functions of the seeds
// and the step, the loader's position and the optimiser state are checkpointed, and every reduction
// runs in a fixed order; so N steps, a checkpoint, a resume and N more steps give the same losses and
// weights, bit for bit, as 2N straight steps.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "alpha/data/tokenizer.h"
#include "alpha/distributed/communicator.h"
#include "alpha/nn/gpt.h"
#include "alpha/train/train_config.h"

namespace alpha::train {

struct TrainerOptions {
  nn::GPTConfig model;
  TrainConfig train;
  std::filesystem::path run_dir;
  // Text files or folders of .txt (tokenised into RUN_DIR/data), or one folder made by `alpha prepare`
  // (holding tokenizer.model and train_*.bin). Empty: the built-in corpus.
  std::vector<std::string> data;
  bool resume = false;  // continue from RUN_DIR's latest checkpoint (its configs come from the caller)
  bool echo = true;     // print progress lines, validation and the sample on stdout
  // Profile one step (train/profiler.h): RUN_DIR/profile.json, and a table on stdout when echoing. The step
  // counts over the whole run like metrics.jsonl's; 0: this run's third (its last when it runs fewer), so the
  // allocator's pool and cuBLASLt's choices are settled. Only rank 0 profiles.
  bool profile = false;
  int64_t profile_step = 0;
  // Data parallel (docs/DISTRIBUTED.md): this process is one rank of the communicator's group; null: a single
  // process. batch_size is per rank; only rank 0 prints, logs and writes the weights.
  std::shared_ptr<distributed::Communicator> communicator;
};

// The configs a run was saved with, for resuming: the state.json of RUN_DIR's latest checkpoint.
struct SavedConfigs {
  nlohmann::json model;
  nlohmann::json train;
};
SavedConfigs saved_configs(const std::filesystem::path& run_dir);

class Trainer {
 public:
  explicit Trainer(TrainerOptions options);
  ~Trainer();

  // Trains until train.steps (or stop_at_step, if smaller) steps are done, then validates, checkpoints
  // and, when the run is complete, samples. Returns the sample text (empty when none was drawn).
  std::string run(std::optional<int64_t> stop_at_step = std::nullopt);

  const nn::GPT& model() const { return *model_; }
  int64_t steps_done() const { return steps_done_; }

 private:
  struct Data;
  void prepare_data();
  void resume_from_checkpoint();
  double validation_loss();
  void save(int64_t steps_done);
  // One step replayed from the captured graph (cuda_graphs; captured at the first call): queues the batch's
  // copy, the AdamW terms and the replay, and reads the step's loss and scaled gradient norm back (data parallel:
  // the sum of every rank's micro-batches' losses, after waiting for the replay within the communicator's timeout).
  std::pair<double, double> graphed_step(int64_t step, double lr, nn::Recompute recompute);
  // The step's gradient norm (a 0-d f64 device tensor) and its update, queued after the reduction, the same with and
  // without the graph: prepare_update writes the update's per-step scalars (AdamW::prepare_step, ZeRO-1's
  // DataParallel::prepare_sharded_step), which the queued update reads.
  Tensor queue_norm();
  void prepare_update(double lr);
  void queue_update(const Tensor& factor);

  TrainerOptions options_;
  std::unique_ptr<nn::GPT> model_;
  std::unique_ptr<Data> data_;
  int64_t steps_done_ = 0;
};

// A trained model read back from a checkpoint (a step directory, or a run directory: its latest).
struct LoadedModel {
  std::unique_ptr<nn::GPT> model;
  nlohmann::json state;
  std::filesystem::path run_dir;
  data::Tokenizer tokenizer() const;  // the run's tokenizer (RUN_DIR/data/tokenizer.model)
};
LoadedModel load_model(const std::filesystem::path& checkpoint);

// Samples `tokens` tokens after `prompt` (empty: start from end-of-text) and returns the decoded text.
std::string sample_text(const nn::GPT& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                        int64_t tokens, double temperature, int64_t top_k, uint64_t seed);

}  // namespace alpha::train
