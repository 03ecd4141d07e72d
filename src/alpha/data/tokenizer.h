// A byte-level-exact BPE tokenizer on SentencePiece. SentencePiece is configured so that decoding an
// encoding gives back the input byte for byte for any valid UTF-8: identity normalisation, no
// whitespace folding, no dummy prefix, and byte fallback (a character without a piece becomes its
// UTF-8 bytes). A newline is always its own piece; the end-of-text piece separates documents and is
// never produced by encode.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace alpha::data {

// Token ids are stored as uint16 in shards, so a vocabulary holds at most this many pieces.
inline constexpr int kMaxVocabSize = 65536;
// unk + end-of-text + newline + 256 byte pieces + at least one learned piece.
inline constexpr int kMinVocabSize = 260;

struct TokenizerTrainOptions {
  int vocab_size = 4096;
  // Beyond this much text, training uses every k-th line so that it stays fast on large corpora.
  size_t max_training_bytes = size_t(256) << 20;
};

class Tokenizer {
 public:
  // Loads a .model file written by train (IOError naming the file when it is missing or is not an
  // Alpha tokenizer).
  static Tokenizer load(const std::string& path);
  // The same from the bytes of a .model file (`origin` names them in errors, as the path does).
  static Tokenizer from_serialized(std::string serialized, const std::string& origin);
  // Trains on text files (each line is a training sentence) and writes the model to out_path.
  static Tokenizer train(const std::vector<std::string>& input_paths, const std::string& out_path,
                         const TokenizerTrainOptions& options = {});
  // Trains on texts held in memory and writes the model to out_path.
  static Tokenizer train_on_texts(std::span<const std::string> texts, const std::string& out_path,
                                  const TokenizerTrainOptions& options = {});

  // text must be valid UTF-8 (ValueError naming the byte offset otherwise).
  std::vector<int32_t> encode(std::string_view text) const;
  // Concatenates the pieces' bytes; the end-of-text piece decodes to nothing. Ids out of range are a
  // ValueError.
  std::string decode(std::span<const int32_t> ids) const;

  int vocab_size() const;
  int32_t eot_id() const;
  // Writes the model (as loaded) to path atomically.
  void save(const std::string& path) const;

 private:
  struct Model;
  explicit Tokenizer(std::shared_ptr<const Model> model) : model_(std::move(model)) {}
  // Checks a freshly trained model and writes it to out_path.
  static Tokenizer finish_training(std::string serialized, const std::string& out_path);
  std::shared_ptr<const Model> model_;
};

}  // namespace alpha::data
