#include "alpha/data/prepare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <regex>

#include "alpha/core/error.h"
#include "alpha/core/file_io.h"
#include "alpha/data/builtin_corpus.h"
#include "alpha/data/shard.h"
#include "alpha/data/tokenizer.h"

namespace alpha::data {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kOp = "prepare";

std::string shard_name(const std::string& split, size_t index) {
  char digits[16];
  std::snprintf(digits, sizeof digits, "%06zu", index);
  return split + "_" + digits + ".bin";
}

// Collects one split's tokens and writes a shard whenever shard_tokens have gathered.
class ShardSink {
 public:
  ShardSink(fs::path dir, std::string split, size_t shard_tokens, std::vector<std::string>& written)
      : dir_(std::move(dir)), split_(std::move(split)), shard_tokens_(shard_tokens), written_(written) {}

  void append(int32_t eot, std::span<const int32_t> tokens) {
    push(eot);
    for (int32_t token : tokens) push(token);
  }
  void finish() {
    if (!buffer_.empty()) flush();
    remove_stale_shards();
  }
  int64_t total() const { return total_; }

 private:
  void push(int32_t token) {
    buffer_.push_back(uint16_t(token));  // ids are below the vocabulary size, at most 65536
    ++total_;
    if (buffer_.size() == shard_tokens_) flush();
  }
  void flush() {
    written_.push_back((dir_ / shard_name(split_, written_.size())).string());
    write_shard(written_.back(), buffer_);
    buffer_.clear();
  }
  // Shards of this split left by an earlier, larger run would otherwise be read as part of this one.
  void remove_stale_shards() {
    const std::regex pattern(split_ + "_([0-9]{6})\\.bin");
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      std::smatch match;
      std::string name = entry.path().filename().string();
      if (std::regex_match(name, match, pattern) && std::stoul(match[1].str()) >= written_.size() &&
          !fs::remove(entry.path(), ec))
        raise_io(kOp, entry.path().string(), -1, "cannot remove a shard left by an earlier run: " + ec.message());
    }
    if (ec) raise_io(kOp, dir_.string(), -1, "cannot list the output folder: " + ec.message());
  }

  fs::path dir_;
  std::string split_;
  size_t shard_tokens_;
  std::vector<std::string>& written_;
  std::vector<uint16_t> buffer_;
  int64_t total_ = 0;
};

void check_options(const PrepareOptions& o) {
  if (o.out_dir.empty()) raise<ConfigError>(kOp, "out", "an output folder", "an empty path");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    raise<ConfigError>(kOp, "val_fraction", "a fraction in [0, 1)", std::to_string(o.val_fraction));
  if (o.shard_tokens < 1 || o.shard_tokens > std::numeric_limits<int32_t>::max())
    raise<ConfigError>(kOp, "shard_tokens", "in [1, 2147483647]", std::to_string(o.shard_tokens));
  if (o.tokenizer_path && o.vocab_size)
    raise<ConfigError>(kOp, "vocab_size", "no vocabulary size with a given tokenizer", std::to_string(*o.vocab_size));
  if (o.builtin_corpus == !o.inputs.empty())
    raise<ConfigError>(kOp, "inputs", "either input paths or the built-in corpus",
                       o.builtin_corpus ? "both" : "neither");
}

}  // namespace

std::vector<std::string> list_text_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::recursive_directory_iterator(input, ec))
        if (entry.is_regular_file() && entry.path().extension() == ".txt") found.push_back(entry.path().string());
      if (ec) raise_io(kOp, input, -1, "cannot list the folder: " + ec.message());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(input, ec)) {
      files.push_back(input);
    } else {
      raise_io(kOp, input, -1, "no such file or folder");
    }
  }
  return files;
}

PrepareResult prepare(const PrepareOptions& options) {
  check_options(options);
  std::vector<std::string> files = list_text_files(options.inputs);
  if (!options.builtin_corpus && files.empty())
    raise<ConfigError>(kOp, "inputs", "at least one .txt file", "none in the given folders");
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) raise_io(kOp, options.out_dir, -1, "cannot create the output folder: " + ec.message());

  PrepareResult result;
  result.tokenizer_path = (fs::path(options.out_dir) / "tokenizer.model").string();
  std::string builtin_text = options.builtin_corpus ? builtin_corpus() : std::string();
  std::optional<Tokenizer> tokenizer;
  if (options.tokenizer_path) {
    tokenizer = Tokenizer::load(*options.tokenizer_path);
    if (!fs::equivalent(*options.tokenizer_path, result.tokenizer_path, ec)) tokenizer->save(result.tokenizer_path);
  } else if (options.builtin_corpus) {
    tokenizer = Tokenizer::train_on_texts(std::span(&builtin_text, 1), result.tokenizer_path,
                                          {.vocab_size = options.vocab_size.value_or(1024)});
  } else {
    tokenizer = Tokenizer::train(files, result.tokenizer_path, {.vocab_size = options.vocab_size.value_or(4096)});
  }

  ShardSink train(options.out_dir, "train", size_t(options.shard_tokens), result.train_shards);
  ShardSink val(options.out_dir, "val", size_t(options.shard_tokens), result.val_shards);
  auto add_document = [&](const std::string& text) {
    std::vector<int32_t> tokens = tokenizer->encode(text);
    size_t n_val = size_t(std::llround(options.val_fraction * double(tokens.size())));
    std::span<const int32_t> all(tokens);
    train.append(tokenizer->eot_id(), all.first(tokens.size() - n_val));
    if (n_val > 0) val.append(tokenizer->eot_id(), all.last(n_val));
    ++result.documents;
  };
  if (options.builtin_corpus) add_document(builtin_text);
  for (const auto& path : files) {
    std::string text = read_file(path, kOp);
    if (auto bad = first_invalid_utf8(text)) raise_io(kOp, path, (long long)*bad, "invalid UTF-8");
    add_document(text);
  }
  train.finish();
  val.finish();
  result.train_tokens = train.total();
  result.val_tokens = val.total();
  return result;
}

}  // namespace alpha::data
