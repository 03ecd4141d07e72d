// `alpha tokenizer train --input PATH... [--vocab 4096] --out tokenizer.model`
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "alpha/cli/commands.h"
#include "alpha/data/prepare.h"
#include "alpha/data/tokenizer.h"

namespace alpha::cli {
namespace {

struct TrainArgs {
  std::vector<std::string> inputs;
  int vocab_size = 4096;
  std::string out;
};

void run_train(const TrainArgs& args) {
  auto files = data::list_text_files(args.inputs);
  auto tokenizer = data::Tokenizer::train(files, args.out, {.vocab_size = args.vocab_size});
  std::cout << "wrote " << args.out << ": " << tokenizer.vocab_size() << " pieces, end-of-text id "
            << tokenizer.eot_id() << ", trained on " << files.size() << " file(s)\n";
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto* tokenizer = app.add_subcommand("tokenizer", "Train a BPE tokenizer");
  tokenizer->require_subcommand(1);
  auto* train = tokenizer->add_subcommand("train", "Train a tokenizer on text files and write its .model file");
  auto args = std::make_shared<TrainArgs>();
  train->add_option("--input", args->inputs, "Text files, or folders of .txt files (repeatable)")->required();
  train->add_option("--vocab", args->vocab_size, "Vocabulary size, at most 65536")->capture_default_str();
  train->add_option("--out", args->out, "The .model file to write")->required();
  train->callback([args] { run_train(*args); });
}

}  // namespace alpha::cli
