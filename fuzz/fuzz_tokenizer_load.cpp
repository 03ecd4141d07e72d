// Tokenizer model loading (alpha/data/tokenizer.h, Tokenizer::from_serialized, which Tokenizer::load reads
// a .model file through) on arbitrary bytes: anything that is not a SentencePiece model with Alpha's
// pieces (end-of-text, the 256 byte pieces) must raise IOError; a model it accepts must encode and
// decode without crashing.
#include <string>
#include <vector>

#include "alpha/data/tokenizer.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace alpha;
  fuzz::expect_typed_errors([&] {
    data::Tokenizer tok = data::Tokenizer::from_serialized(std::string(fuzz::as_text(data, size)), "fuzz.model");
    fuzz::require(tok.vocab_size() > 0 && tok.eot_id() >= 0 && tok.eot_id() < tok.vocab_size(),
                  "a loaded model has an end-of-text piece inside its vocabulary");
    std::vector<int32_t> ids = tok.encode("Once upon a time, \xE2\x96\x81 a caf\xC3\xA9 \xF0\x9F\x98\x80\n  12+3=15\n");
    for (int32_t id : ids) fuzz::require(id >= 0 && id < tok.vocab_size(), "encode gives ids inside the vocabulary");
    (void)tok.decode(ids);
    std::vector<int32_t> all(size_t(tok.vocab_size()));
    for (int32_t i = 0; i < tok.vocab_size(); ++i) all[size_t(i)] = i;
    (void)tok.decode(all);
  });
  return 0;
}
