// `alpha prepare --input PATH... | --builtin  [--tokenizer MODEL | --vocab N] --out DIR
//                [--val-fraction 0.1] [--shard-tokens 100000000]`
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "alpha/cli/commands.h"
#include "alpha/data/prepare.h"

namespace alpha::cli {
namespace {

struct PrepareArgs {
  data::PrepareOptions options;
  std::string tokenizer;
  int vocab_size = 0;
  CLI::Option* vocab_option = nullptr;  // tells whether --vocab was given
};

void run_prepare(PrepareArgs args) {
  if (!args.tokenizer.empty()) args.options.tokenizer_path = args.tokenizer;
  if (args.vocab_option->count() > 0) args.options.vocab_size = args.vocab_size;
  data::PrepareResult result = data::prepare(args.options);
  std::cout << "prepared " << result.documents << " document(s) into " << args.options.out_dir << ":\n"
            << "  tokenizer " << result.tokenizer_path << "\n"
            << "  train " << result.train_tokens << " tokens in " << result.train_shards.size() << " shard(s)\n"
            << "  val   " << result.val_tokens << " tokens in " << result.val_shards.size() << " shard(s)\n";
}

}  // namespace

void add_prepare_command(CLI::App& app) {
  auto* prepare = app.add_subcommand("prepare", "Tokenize text into train/val token shards");
  auto args = std::make_shared<PrepareArgs>();
  data::PrepareOptions& o = args->options;
  auto* input = prepare->add_option("--input", o.inputs, "Text files, or folders of .txt files (repeatable)");
  auto* builtin = prepare->add_flag("--builtin", o.builtin_corpus, "Use the built-in generated corpus (about 1 MB)");
  input->excludes(builtin);
  auto* tokenizer = prepare->add_option("--tokenizer", args->tokenizer, "An existing tokenizer .model file");
  auto* vocab = prepare->add_option("--vocab", args->vocab_size,
                                    "Without --tokenizer: train one of this vocabulary size into the output folder "
                                    "(default 4096; 1024 with --builtin)");
  tokenizer->excludes(vocab);
  args->vocab_option = vocab;
  prepare->add_option("--out", o.out_dir, "Output folder")->required();
  prepare->add_option("--val-fraction", o.val_fraction, "Fraction of each document's tokens kept for validation")
      ->capture_default_str();
  prepare->add_option("--shard-tokens", o.shard_tokens, "Tokens per shard at most")->capture_default_str();
  prepare->callback([args] { run_prepare(*args); });
}

}  // namespace alpha::cli
