// Turns text into training data: tokenizes documents (each input file is one document), splits off a
// validation part deterministically, and writes uint16 token shards and the tokenizer into a folder:
//   out/tokenizer.model, out/train_000000.bin ..., out/val_000000.bin ...
// Every document is preceded by the end-of-text token in each split. The validation split is the
// last val_fraction of each document's tokens, so it samples every document, whatever the order of
// the inputs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace alpha::data {

// Every member has an initializer so that designated initializers may leave any out (-Wextra).
struct PrepareOptions {
  std::vector<std::string> inputs{};          // .txt files, or folders searched recursively for them
  bool builtin_corpus = false;                // use the built-in corpus (one document) instead of inputs
  std::string out_dir{};
  std::optional<std::string> tokenizer_path{};  // absent: train one with vocab_size on the inputs
  // Without a tokenizer: the vocabulary to train, by default 4096 (1024 for the built-in corpus,
  // whose small word lists support about 1400 pieces).
  std::optional<int> vocab_size{};
  double val_fraction = 0.1;                  // in [0, 1)
  int64_t shard_tokens = 100'000'000;         // tokens per shard at most
};

struct PrepareResult {
  std::string tokenizer_path;
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;
  int64_t documents = 0;
  int64_t train_tokens = 0;  // end-of-text separators included
  int64_t val_tokens = 0;
};

// Errors: ConfigError for bad options or no input files; IOError naming the file for unreadable
// input, and the file and byte offset for input that is not valid UTF-8.
PrepareResult prepare(const PrepareOptions& options);

// The text files the inputs name, in order: a file as given, a folder's .txt files sorted by path.
std::vector<std::string> list_text_files(const std::vector<std::string>& inputs);

}  // namespace alpha::data
