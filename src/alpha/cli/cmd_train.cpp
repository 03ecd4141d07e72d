// `alpha train`, `alpha sample` and `alpha logits`.
// Every field of the model config and of the train config is also a flag (--n-layer, --lr, ...), made
// from the configs' JSON fields so that a new field needs no CLI code; flags override the config file,
// and on --resume they override the configs the run was saved with.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "alpha/autograd/variable.h"
#include "alpha/cli/commands.h"
#include "alpha/core/error.h"
#include "alpha/dashboard/server.h"
#include "alpha/distributed/launch_env.h"
#include "alpha/distributed/local_launcher.h"
#include "alpha/distributed/nccl_communicator.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/train/safetensors.h"
#include "alpha/train/trainer.h"

namespace alpha::cli {
namespace {

namespace fs = std::filesystem;

fs::path configs_dir() {
  if (const char* env = std::getenv("ALPHA_CONFIGS_DIR")) return env;
  return ALPHA_DEFAULT_CONFIGS_DIR;
}

// One string flag per JSON field (snake_case field -> --kebab-case flag); the given ones are parsed with
// the type of the field's default value.
class ConfigFlags {
 public:
  ConfigFlags(CLI::App& cmd, const nlohmann::json& defaults, const std::string& group) : defaults_(defaults) {
    for (auto it = defaults.begin(); it != defaults.end(); ++it) {
      std::string flag = "--" + it.key();
      std::replace(flag.begin(), flag.end(), '_', '-');
      auto& slot = values_[it.key()];
      options_[it.key()] = cmd.add_option(flag, slot, "default: " + it.value().dump())->group(group);
    }
  }

  nlohmann::json given() const {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [field, option] : options_) {
      if (option->count() == 0) continue;
      const std::string& text = values_.at(field);
      const nlohmann::json& like = defaults_.at(field);
      nlohmann::json value;
      if (like.is_string()) value = text;
      else value = nlohmann::json::parse(text, nullptr, false);
      bool fits = like.is_string() || (like.is_boolean() && value.is_boolean()) ||
                  (like.is_number_integer() && value.is_number_integer()) || (like.is_number_float() && value.is_number());
      if (!fits) raise<ConfigError>("train", option->get_name(), "a value like " + like.dump(), "'" + text + "'");
      out[field] = value;
    }
    return out;
  }

 private:
  nlohmann::json defaults_;
  std::map<std::string, std::string> values_;
  std::map<std::string, CLI::Option*> options_;
};

struct TrainArgs {
  std::string config = "tiny";
  std::vector<std::string> data;
  std::string out = "runs/latest";
  bool resume = false;
  bool dashboard = false;
  int dashboard_port = 8765;
  int gpus = 0;  // 0: one process, no launcher
  bool profile = false;
  int64_t profile_step = 0;  // 0: the run's third step
  std::unique_ptr<ConfigFlags> model_flags, train_flags;
};

void run_train(const TrainArgs& args) {
  nlohmann::json model_json, train_json;
  if (args.resume) {
    train::SavedConfigs saved = train::saved_configs(args.out);
    model_json = saved.model;
    // Through from_json, so that a field added since the run was saved gets its default and its flag works.
    train_json = train::TrainConfig::from_json(saved.train).to_json();
  } else {
    model_json = nn::load_gpt_config(args.config, configs_dir()).to_json();
    train_json = train::TrainConfig().to_json();
  }
  train::TrainerOptions options;
  nlohmann::json train_flags = args.train_flags->given();
  if (args.gpus > 0 && !train_flags.contains("device")) train_flags["device"] = "cuda";  // --gpus means GPUs
  options.model = nn::GPTConfig::from_json(train::merge_fields(model_json, args.model_flags->given(), "model config"));
  options.train = train::TrainConfig::from_json(train::merge_fields(train_json, train_flags, "train config"));
  // Several ranks (docs/DISTRIBUTED.md): `--gpus N` starts N workers running this same command; a worker
  // (or a process started by torchrun or srun) finds its rank in the environment and joins the group.
  auto timeout = std::chrono::milliseconds(int64_t(options.train.dist_timeout_s * 1000));
  std::optional<distributed::LaunchEnv> env = distributed::launch_env();
  if (env && env->world_size == 1) env.reset();  // e.g. srun with one task: a single process
  if (args.gpus > 1 && !env) {
    distributed::LaunchResult result = distributed::launch_local_workers(distributed::own_command_line(), args.gpus,
                                                                         timeout + std::chrono::seconds(30));
    if (result.exit_code() != 0)
      throw distributed::RankFailureError("[train] " + result.summary(), result.first_failed_rank);
    return;
  }
  if (env && args.gpus > 0 && env->world_size != args.gpus)
    raise<ConfigError>("train", "--gpus", "the world size of the " + env->source + " environment, " +
                       std::to_string(env->world_size), std::to_string(args.gpus));
  if (env && env->world_size > 1) options.communicator = distributed::make_nccl_communicator(*env, timeout);
  options.run_dir = args.out;
  options.data = args.data;
  options.resume = args.resume;
  options.profile = args.profile || args.profile_step != 0;
  options.profile_step = args.profile_step;
  // The server reads files only when the page asks, so it costs the loop nothing; it lists the run's
  // siblings too (the folder holding --out), for comparison.
  std::unique_ptr<dashboard::DashboardServer> server;
  if (args.dashboard && (!options.communicator || options.communicator->rank() == 0)) {
    // Checked here so that the error names this command's flag, not the server's --port.
    if (args.dashboard_port < 0 || args.dashboard_port > 65535)
      raise<ValueError>("train", "--dashboard-port", "a port from 0 to 65535 (0: any free one)",
                        std::to_string(args.dashboard_port));
    fs::path run_dir = fs::absolute(args.out).lexically_normal();
    fs::path runs_dir = (run_dir.has_filename() ? run_dir : run_dir.parent_path()).parent_path();
    server = std::make_unique<dashboard::DashboardServer>(
        dashboard::ServerOptions{runs_dir, "127.0.0.1", args.dashboard_port});
    server->start();
    std::cout << "dashboard: " << server->url() << " (runs in " << runs_dir.string() << ")" << std::endl;
  }
  train::Trainer trainer(options);
  try {
    trainer.run();
  } catch (const distributed::RankFailureError& e) {
    // The group failed and was aborted, but the device may still hold kernels waiting for the dead peer forever (a
    // collective inside a replayed CUDA graph, whose graph the trainer's destructor would wait for): the error is
    // said as main says errors, and the process ends here, with main's status for them.
    std::cerr << "alpha: " << e.what() << std::endl;
    std::_Exit(1);
  }
}

struct SampleArgs {
  std::string checkpoint;
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 0;
};

void run_sample(const SampleArgs& args) {
  train::LoadedModel loaded = train::load_model(args.checkpoint);
  std::cout << args.prompt
            << train::sample_text(*loaded.model, loaded.tokenizer(), args.prompt, args.tokens, args.temperature,
                                  args.top_k, args.seed)
            << "\n";
}

struct LogitsArgs {
  std::string checkpoint, input, out;
};

// Runs a token batch through a checkpoint's model and writes the logits: a bridge for other programs
// (tests use it to compare Alpha's forward pass with an independent PyTorch model).
void run_logits(const LogitsArgs& args) {
  train::LoadedModel loaded = train::load_model(args.checkpoint);
  train::SafetensorsContents in = train::read_safetensors(args.input);
  auto ids = std::find_if(in.tensors.begin(), in.tensors.end(), [](const auto& t) { return t.first == "ids"; });
  if (ids == in.tensors.end()) raise<ConfigError>("logits", "--input", "a tensor named 'ids' (i32 [B, T])", args.input);
  autograd::NoGradGuard no_grad;
  Tensor logits = loaded.model->forward(ids->second).logits.value();
  train::write_safetensors(args.out, {{"logits", logits}});
  std::cout << "wrote logits " << shape_str(logits.shape()) << " to " << args.out << "\n";
}

}  // namespace

void add_train_commands(CLI::App& app) {
  auto* train_cmd = app.add_subcommand("train", "Train a GPT (built-in corpus unless --data is given), then sample");
  auto targs = std::make_shared<TrainArgs>();
  train_cmd->add_option("--config", targs->config, "Model config: a name in configs/ (tiny, seed, gpt2-124m) or a JSON file")
      ->capture_default_str();
  train_cmd->add_option("--data", targs->data, "Text file(s) or folder(s) of .txt, or a folder made by `alpha prepare`");
  train_cmd->add_option("--out", targs->out, "Run directory")->capture_default_str();
  train_cmd->add_flag("--resume", targs->resume, "Continue the run in --out from its latest checkpoint");
  train_cmd->add_option("--gpus", targs->gpus,
                        "Train data-parallel on this many local GPUs, one worker process each (docs/DISTRIBUTED.md)")
      ->check(CLI::Range(1, 1024));
  train_cmd->add_flag("--dashboard", targs->dashboard, "Serve the live dashboard (on 127.0.0.1) while training");
  train_cmd->add_option("--dashboard-port", targs->dashboard_port, "The dashboard's port; 0 = any free one")
      ->capture_default_str();
  train_cmd->add_flag("--profile", targs->profile,
                      "Profile one step (the third): time per op and, on a GPU, per kernel (CUPTI), printed and "
                      "written to OUT/profile.json");
  train_cmd->add_option("--profile-step", targs->profile_step, "Profile this step instead (implies --profile)")
      ->check(CLI::PositiveNumber);
  targs->model_flags = std::make_unique<ConfigFlags>(*train_cmd, nn::GPTConfig().to_json(), "Model");
  targs->train_flags = std::make_unique<ConfigFlags>(*train_cmd, train::TrainConfig().to_json(), "Training");
  train_cmd->callback([targs] { run_train(*targs); });

  auto* sample_cmd = app.add_subcommand("sample", "Sample text from a checkpoint");
  auto sargs = std::make_shared<SampleArgs>();
  sample_cmd->add_option("--checkpoint", sargs->checkpoint, "A run directory (its latest checkpoint) or a step directory")
      ->required();
  sample_cmd->add_option("--prompt", sargs->prompt, "Text to continue (default: start of a document)");
  sample_cmd->add_option("--tokens", sargs->tokens, "Tokens to generate")->capture_default_str();
  sample_cmd->add_option("--temperature", sargs->temperature, "0 = greedy")->capture_default_str();
  sample_cmd->add_option("--top-k", sargs->top_k, "0 = the whole vocabulary")->capture_default_str();
  sample_cmd->add_option("--seed", sargs->seed, "Sampling seed")->capture_default_str();
  sample_cmd->callback([sargs] { run_sample(*sargs); });

  auto* logits_cmd = app.add_subcommand("logits", "Write a checkpoint's logits for a token batch (safetensors in, out)");
  auto largs = std::make_shared<LogitsArgs>();
  logits_cmd->add_option("--checkpoint", largs->checkpoint, "A run directory or a step directory")->required();
  logits_cmd->add_option("--input", largs->input, "safetensors file with 'ids': i32 [B, T]")->required();
  logits_cmd->add_option("--out", largs->out, "safetensors file to write 'logits' to")->required();
  logits_cmd->callback([largs] { run_logits(*largs); });
}

}  // namespace alpha::cli
