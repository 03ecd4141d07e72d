#include "alpha/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <unordered_map>

#include "alpha/core/error.h"
#include "alpha/core/file_io.h"

namespace alpha::data {
namespace {

constexpr std::string_view kEotPiece = "<|endoftext|>";
// SentencePiece writes a space as U+2581 inside pieces, so a literal U+2581 in the input would come
// back as a space: encode spells it with byte pieces instead.
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";
// Lines longer than this are fed to the trainer in pieces (SentencePiece drops longer sentences).
constexpr size_t kMaxTrainingLineBytes = 4096;
// encode works on chunks of about this many bytes, cut after a newline, in parallel.
constexpr size_t kEncodeChunkBytes = size_t(1) << 16;

std::string byte_piece(int byte) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", byte);
  return name;
}

// Feeds the trainer the lines of a sequence of texts, one sentence per line (newlines themselves are
// byte pieces and never merged). Keeps every `stride`-th line, and cuts long lines at UTF-8
// character boundaries. An exception from next_text (a bad file) ends the iteration and is rethrown
// by the caller after training returns, so it never unwinds through SentencePiece.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  LineIterator(std::function<bool(std::string&)> next_text, size_t stride)
      : next_text_(std::move(next_text)), stride_(stride) {
    advance();
  }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (error_) return {sentencepiece::util::StatusCode::kAborted, "reading the training text failed"};
    return {};
  }
  std::exception_ptr error() const { return error_; }

 private:
  void advance() {
    while (true) {
      if (pos_ >= text_.size()) {
        bool more = false;
        try {
          more = next_text_(text_);
        } catch (...) {
          error_ = std::current_exception();
        }
        if (!more) {
          done_ = true;
          return;
        }
        pos_ = 0;
        continue;
      }
      size_t newline = text_.find('\n', pos_);
      size_t end = newline == std::string::npos ? text_.size() : newline;
      if (end - pos_ > kMaxTrainingLineBytes) {
        end = pos_ + kMaxTrainingLineBytes;
        while ((static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;  // not mid-character
      }
      std::string_view line(text_.data() + pos_, end - pos_);
      pos_ = (end < text_.size() && text_[end] == '\n') ? end + 1 : end;
      if (line.empty() || line_index_++ % stride_ != 0) continue;
      line_.assign(line);
      return;
    }
  }

  std::function<bool(std::string&)> next_text_;
  size_t stride_;
  std::string text_;
  size_t pos_ = 0;
  size_t line_index_ = 0;
  std::string line_;
  bool done_ = false;
  std::exception_ptr error_;
};

std::string quoted_list(std::span<const std::string> items) {
  std::string out;
  for (const auto& item : items) out.append(out.empty() ? "'" : ", '").append(item).append("'");
  return out;
}

void check_vocab_size(int vocab_size) {
  if (vocab_size > kMaxVocabSize)
    raise<ConfigError>("Tokenizer::train", "vocab_size",
                       "at most " + std::to_string(kMaxVocabSize) + " (shards store token ids as uint16)",
                       std::to_string(vocab_size));
  if (vocab_size < kMinVocabSize)
    raise<ConfigError>("Tokenizer::train", "vocab_size",
                       "at least " + std::to_string(kMinVocabSize) +
                           " (unknown, end-of-text and 256 byte pieces, and one learned piece)",
                       std::to_string(vocab_size));
}

}  // namespace

struct Tokenizer::Model {
  sentencepiece::SentencePieceProcessor sp;
  std::string serialized;
  int32_t eot = -1;
  int32_t byte_ids[256] = {};
  std::vector<std::string> piece_bytes;  // what each id decodes to

  // Parses and checks a serialized model; `origin` names where it came from in errors.
  Model(std::string bytes, const std::string& origin) : serialized(std::move(bytes)) {
    constexpr std::string_view op = "Tokenizer::load";
    sentencepiece::util::Status status;
    try {
      status = sp.LoadFromSerializedProto(serialized);
    } catch (const std::exception& e) {  // SentencePiece's trie builder throws on some hostile pieces
      raise_io(op, origin, -1, std::string("not a SentencePiece model: ") + e.what());
    }
    if (!status.ok()) raise_io(op, origin, -1, std::string("not a SentencePiece model: ") + status.message());
    int n = sp.GetPieceSize();
    if (n > kMaxVocabSize)
      raise_io(op, origin, -1, "the vocabulary has " + std::to_string(n) + " pieces, more than the " +
                                   std::to_string(kMaxVocabSize) + " a uint16 shard can hold");
    eot = sp.PieceToId(kEotPiece);
    if (eot == sp.unk_id() || !sp.IsControl(eot))
      raise_io(op, origin, -1, "not an Alpha tokenizer: no control piece " + std::string(kEotPiece));
    for (int b = 0; b < 256; ++b) {
      byte_ids[b] = sp.PieceToId(byte_piece(b));
      if (byte_ids[b] == sp.unk_id() || !sp.IsByte(byte_ids[b]))
        raise_io(op, origin, -1, "not an Alpha tokenizer: no byte piece " + byte_piece(b) +
                                     " (it must be trained with byte fallback)");
    }
    piece_bytes.resize(size_t(n));
    for (int b = 0; b < 256; ++b) piece_bytes[size_t(byte_ids[b])] = std::string(1, char(b));
    for (int id = 0; id < n; ++id) {
      if (sp.IsByte(id) || sp.IsControl(id)) continue;
      if (sp.IsUnknown(id)) {
        piece_bytes[size_t(id)] = "\xEF\xBF\xBD";  // U+FFFD, never produced by encode
        continue;
      }
      std::string text;
      std::string_view piece = sp.IdToPiece(id);
      for (size_t pos = 0; pos < piece.size();) {
        if (piece.substr(pos, kSpaceMark.size()) == kSpaceMark) {
          text.push_back(' ');
          pos += kSpaceMark.size();
        } else {
          text.push_back(piece[pos++]);
        }
      }
      piece_bytes[size_t(id)] = std::move(text);
    }
  }

  // Encodes text that holds no chunk boundary of interest: newlines and U+2581 become byte pieces,
  // the stretches between them go through SentencePiece.
  void encode_chunk(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<int> ids;
    auto encode_stretch = [&](std::string_view stretch) {
      if (stretch.empty()) return;
      auto status = sp.Encode(stretch, &ids);
      if (!status.ok()) raise<BackendError>("Tokenizer::encode", "text", "a successful SentencePiece encode",
                                            status.message());
      out.insert(out.end(), ids.begin(), ids.end());
    };
    size_t start = 0;
    for (size_t pos = 0; pos < text.size();) {
      if (text[pos] == '\n') {
        encode_stretch(text.substr(start, pos - start));
        out.push_back(byte_ids[size_t('\n')]);
        start = ++pos;
      } else if (text.substr(pos, kSpaceMark.size()) == kSpaceMark) {
        encode_stretch(text.substr(start, pos - start));
        for (char c : kSpaceMark) out.push_back(byte_ids[static_cast<unsigned char>(c)]);
        start = pos += kSpaceMark.size();
      } else {
        ++pos;
      }
    }
    encode_stretch(text.substr(start));
  }
};

Tokenizer Tokenizer::load(const std::string& path) { return from_serialized(read_file(path, "Tokenizer::load"), path); }

Tokenizer Tokenizer::from_serialized(std::string serialized, const std::string& origin) {
  return Tokenizer(std::make_shared<const Model>(std::move(serialized), origin));
}

namespace {

// Runs the SentencePiece trainer over the texts that next_text yields (total_bytes of them) and
// returns the serialized model. `corpus` names the input in errors.
std::string train_model(std::function<bool(std::string&)> next_text, size_t total_bytes,
                        const TokenizerTrainOptions& options, const std::string& corpus) {
  check_vocab_size(options.vocab_size);
  size_t stride = options.max_training_bytes == 0
                      ? 1
                      : std::max<size_t>(1, (total_bytes + options.max_training_bytes - 1) / options.max_training_bytes);
  LineIterator lines(std::move(next_text), stride);
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      // Exact round trips: no normalisation, keep every space, no invented leading space.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"byte_fallback", "true"},
      // Runs of spaces (indentation) may become pieces; digits stay single so numbers compose.
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      // Rare characters are left to byte fallback rather than spending vocabulary on them.
      {"character_coverage", "0.9995"},
      {"max_sentence_length", std::to_string(kMaxTrainingLineBytes)},
      {"unk_id", "0"},
      {"eos_id", "1"},
      {"eos_piece", std::string(kEotPiece)},
      {"bos_id", "-1"},
      {"pad_id", "-1"},
      {"minloglevel", "2"},
  };
  std::string serialized;
  auto status = sentencepiece::SentencePieceTrainer::Train(spec, &lines, &serialized);
  if (lines.error()) std::rethrow_exception(lines.error());
  if (!status.ok()) {
    // SentencePiece prefixes its messages with the source line and the failed check; keep the words.
    std::string_view message = status.message();
    if (size_t words = message.find("] "); message.starts_with("./") && words != std::string_view::npos)
      message.remove_prefix(words + 2);
    raise<ConfigError>("Tokenizer::train", "vocab_size", "a vocabulary the corpus " + corpus + " supports",
                       std::to_string(options.vocab_size) + " (SentencePiece: " + std::string(message) + ")");
  }
  return serialized;
}

}  // namespace

Tokenizer Tokenizer::finish_training(std::string serialized, const std::string& out_path) {
  auto model = std::make_shared<const Model>(std::move(serialized), out_path);
  write_file_atomic(out_path, model->serialized, "Tokenizer::train");
  return Tokenizer(std::move(model));
}

Tokenizer Tokenizer::train(const std::vector<std::string>& input_paths, const std::string& out_path,
                           const TokenizerTrainOptions& options) {
  if (input_paths.empty())
    raise<ConfigError>("Tokenizer::train", "input_paths", "at least one text file", "none");
  size_t total_bytes = 0;
  for (const auto& path : input_paths) {
    std::error_code ec;
    auto size = std::filesystem::file_size(path, ec);
    if (ec || !std::filesystem::is_regular_file(path))
      raise_io("Tokenizer::train", path, -1, "cannot read the training text: not a readable file");
    total_bytes += size_t(size);
  }
  size_t next = 0;
  auto next_text = [&](std::string& text) {
    if (next == input_paths.size()) return false;
    const std::string& path = input_paths[next++];
    text = read_file(path, "Tokenizer::train");
    if (auto bad = first_invalid_utf8(text)) raise_io("Tokenizer::train", path, (long long)*bad, "invalid UTF-8");
    return true;
  };
  return finish_training(train_model(next_text, total_bytes, options, quoted_list(input_paths)), out_path);
}

Tokenizer Tokenizer::train_on_texts(std::span<const std::string> texts, const std::string& out_path,
                                    const TokenizerTrainOptions& options) {
  size_t total_bytes = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (auto bad = first_invalid_utf8(texts[i]))
      raise<ValueError>("Tokenizer::train", "texts[" + std::to_string(i) + "]", "valid UTF-8",
                        "an invalid sequence at byte offset " + std::to_string(*bad));
    total_bytes += texts[i].size();
  }
  size_t next = 0;
  auto next_text = [&](std::string& text) {
    if (next == texts.size()) return false;
    text = texts[next++];
    return true;
  };
  return finish_training(train_model(next_text, total_bytes, options, "held in memory"), out_path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (auto bad = first_invalid_utf8(text))
    raise<ValueError>("Tokenizer::encode", "text", "valid UTF-8",
                      "an invalid sequence at byte offset " + std::to_string(*bad));
  // Chunks end just after a newline, which is always a piece of its own, so encoding them apart
  // gives the same ids as encoding the whole text, whatever the thread count.
  std::vector<std::string_view> chunks;
  for (size_t start = 0; start < text.size();) {
    size_t cut = start + kEncodeChunkBytes >= text.size() ? std::string::npos : text.find('\n', start + kEncodeChunkBytes);
    size_t end = cut == std::string::npos ? text.size() : cut + 1;
    chunks.push_back(text.substr(start, end - start));
    start = end;
  }
  std::vector<std::vector<int32_t>> encoded(chunks.size());
  std::vector<std::exception_ptr> errors(chunks.size());
#pragma omp parallel for schedule(dynamic) if (chunks.size() > 1)
  for (size_t i = 0; i < chunks.size(); ++i) {
    try {
      model_->encode_chunk(chunks[i], encoded[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  std::vector<int32_t> ids;
  for (auto& part : encoded) ids.insert(ids.end(), part.begin(), part.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= vocab_size())
      raise<ValueError>("Tokenizer::decode", "ids[" + std::to_string(i) + "]",
                        "a token id in [0, " + std::to_string(vocab_size()) + ")", std::to_string(id));
    text += model_->piece_bytes[size_t(id)];
  }
  return text;
}

int Tokenizer::vocab_size() const { return int(model_->piece_bytes.size()); }
int32_t Tokenizer::eot_id() const { return model_->eot; }

void Tokenizer::save(const std::string& path) const {
  write_file_atomic(path, model_->serialized, "Tokenizer::save");
}

}  // namespace alpha::data
