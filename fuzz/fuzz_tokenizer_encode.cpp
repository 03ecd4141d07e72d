// Text encoding (alpha/data/tokenizer.h) with a real trained tokenizer on arbitrary input: invalid UTF-8
// must raise ValueError; valid UTF-8 must come back byte for byte from decode(encode(text)), the round
// trip the tokenizer promises. The input read as int32 token ids must decode or raise ValueError.
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "alpha/core/file_io.h"
#include "alpha/data/builtin_corpus.h"
#include "alpha/data/tokenizer.h"
#include "fuzz_common.h"

namespace {

std::optional<alpha::data::Tokenizer> tokenizer;

}  // namespace

// One small tokenizer for the run, trained on the built-in corpus plus some non-ASCII text (about a second).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  namespace fs = std::filesystem;
  fs::path model = fs::temp_directory_path() / ("alpha_fuzz_tokenizer_" + std::to_string(::getpid()) + ".model");
  std::vector<std::string> texts = {alpha::data::builtin_corpus(1, 100'000),
                                    "caf\xC3\xA9 na\xC3\xAFve \xE2\x96\x81\xE2\x96\x81 \xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC\n\t tabs\r\n"};
  tokenizer = alpha::data::Tokenizer::train_on_texts(texts, model.string(), {.vocab_size = 400});
  std::error_code ignored;
  fs::remove(model, ignored);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace alpha;
  std::string_view text = fuzz::as_text(data, size);
  const bool valid = !first_invalid_utf8(text).has_value();
  try {
    std::vector<int32_t> ids = tokenizer->encode(text);
    fuzz::require(valid, "encode accepts only valid UTF-8");
    for (int32_t id : ids) fuzz::require(id >= 0 && id < tokenizer->vocab_size(), "ids inside the vocabulary");
    fuzz::require(tokenizer->decode(ids) == text, "decode(encode(text)) == text");
  } catch (const ValueError&) {
    fuzz::require(!valid, "encode raises ValueError only for invalid UTF-8");
  }
  std::vector<int32_t> ids(size / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int32_t));
  bool in_range = true;
  for (int32_t id : ids) in_range &= id >= 0 && id < tokenizer->vocab_size();
  try {
    (void)tokenizer->decode(ids);
    fuzz::require(in_range, "decode accepts only ids inside the vocabulary");
  } catch (const ValueError&) {
    fuzz::require(!in_range, "decode raises ValueError only for ids outside the vocabulary");
  }
  return 0;
}
