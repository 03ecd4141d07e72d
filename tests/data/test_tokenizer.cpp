// The tokenizer: exact round trips on tricky text, training errors, model files, chunked encoding.

#include <gtest/gtest.h>

#include "alpha/core/file_io.h"
#include "alpha/data/builtin_corpus.h"
#include "alpha/data/tokenizer.h"
#include "core/file_test_util.h"
#include "support/checks.h"

namespace alpha::data {
namespace {

constexpr int kVocab = 512;

// One small tokenizer for the suite: trained on 200 kB of the built-in corpus (about a second).
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    std::vector<std::string> texts = {builtin_corpus(1, 200'000)};
    tokenizer_ = new Tokenizer(Tokenizer::train_on_texts(texts, dir_->file("tok.model"), {.vocab_size = kVocab}));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }
  static const Tokenizer& tok() { return *tokenizer_; }
  static test::TempDir* dir_;
  static Tokenizer* tokenizer_;
};
test::TempDir* TokenizerTest::dir_ = nullptr;
Tokenizer* TokenizerTest::tokenizer_ = nullptr;

TEST_F(TokenizerTest, VocabularyAndEndOfText) {
  EXPECT_EQ(tok().vocab_size(), kVocab);
  EXPECT_GE(tok().eot_id(), 0);
  EXPECT_LT(tok().eot_id(), kVocab);
  EXPECT_EQ(tok().decode(std::vector<int32_t>{tok().eot_id()}), "");
}

TEST_F(TokenizerTest, RoundTripsTrickyTextExactly) {
  const std::vector<std::string> cases = {
      "",
      " ",
      "   ",
      " leading space",
      "trailing space ",
      "two  spaces   three    four",
      "\ttab\tand\t\ttabs\t",
      "\n",
      "\n\nlines\n\n\nand blank lines\n",
      "windows\r\nline\r\nends\r\n",
      "  \t \n \t  mixed whitespace \n\t",
      "Once upon a time, there was a little cat.",
      "CJK: 漢字かなカナ한국어 and 中文",
      "emoji: 😀🎉👍🏽 and a family 👨‍👩‍👧",
      "unseen: ©®™ ß ñ é ø Å ∑∫√ ≠ ≤ ¿¡",
      "the meta space \xE2\x96\x81 and \xE2\x96\x81\xE2\x96\x81 and ▁x▁",
      "<|endoftext|> <unk> <s> </s> <0x41> look like specials",
      std::string("a NUL\0in the middle", 19),
      "\x01\x02\x1F\x7F control characters",
      "123456789 0.5 -3e10",
  };
  for (const auto& text : cases) {
    auto ids = tok().encode(text);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, kVocab);
      EXPECT_NE(id, tok().eot_id()) << "encode produced end-of-text for '" << text << "'";
    }
    EXPECT_EQ(tok().decode(ids), text) << "ids: " << ::testing::PrintToString(ids);
  }
}

TEST_F(TokenizerTest, CompressesTextLikeItsTrainingData) {
  std::string text = builtin_corpus(7, 20'000);
  auto ids = tok().encode(text);
  EXPECT_EQ(tok().decode(ids), text);
  // A learned vocabulary packs several bytes into a token; byte-level would be 1.0.
  EXPECT_GT(double(text.size()) / double(ids.size()), 2.5);
}

TEST_F(TokenizerTest, ChunkedEncodingMatchesPieceByPiece) {
  // Long enough to be encoded in several chunks in parallel.
  std::string text = builtin_corpus(3, 300'000);
  auto whole = tok().encode(text);
  std::vector<int32_t> by_line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.find('\n', start), text.size());
    auto part = tok().encode(std::string_view(text).substr(start, end - start + (end < text.size())));
    by_line.insert(by_line.end(), part.begin(), part.end());
    start = end + 1;
  }
  EXPECT_EQ(whole, by_line);
  EXPECT_EQ(tok().decode(whole), text);
}

TEST_F(TokenizerTest, RejectsInvalidUtf8AndBadIds) {
  EXPECT_ALPHA_ERROR(tok().encode("ok\xC3("), ValueError, "Tokenizer::encode", "text", "byte offset 2");
  EXPECT_ALPHA_ERROR(tok().encode("\xED\xA0\x80"), ValueError, "byte offset 0");  // a surrogate
  EXPECT_ALPHA_ERROR(tok().decode(std::vector<int32_t>{1, kVocab}), ValueError, "Tokenizer::decode", "ids[1]",
                     "[0, 512)", "got 512");
  EXPECT_ALPHA_ERROR(tok().decode(std::vector<int32_t>{-1}), ValueError, "ids[0]");
}

TEST_F(TokenizerTest, SavedModelLoadsToTheSameTokenizer) {
  test::TempDir dir;
  tok().save(dir.file("copy.model"));
  Tokenizer loaded = Tokenizer::load(dir.file("copy.model"));
  std::string text = "Lily and the dog played in the park.\n\tDone!  ";
  EXPECT_EQ(loaded.encode(text), tok().encode(text));
  EXPECT_EQ(loaded.eot_id(), tok().eot_id());
  EXPECT_EQ(loaded.vocab_size(), tok().vocab_size());
}

TEST(TokenizerTrain, TrainsFromFilesToTheGivenPath) {
  test::TempDir dir;
  test::write_raw(dir.file("a.txt"), builtin_corpus(5, 40'000));
  test::write_raw(dir.file("b.txt"), builtin_corpus(6, 40'000));
  Tokenizer tok = Tokenizer::train({dir.file("a.txt"), dir.file("b.txt")}, dir.file("out.model"), {.vocab_size = 400});
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(Tokenizer::load(dir.file("out.model")).vocab_size(), 400);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.vocab")));
}

TEST(TokenizerTrain, IsDeterministic) {
  test::TempDir dir;
  std::vector<std::string> texts = {builtin_corpus(8, 60'000)};
  Tokenizer::train_on_texts(texts, dir.file("a.model"), {.vocab_size = 450});
  Tokenizer::train_on_texts(texts, dir.file("b.model"), {.vocab_size = 450});
  EXPECT_EQ(read_file(dir.file("a.model"), "test"), read_file(dir.file("b.model"), "test"));
}

TEST(TokenizerTrain, ReportsBadInputs) {
  test::TempDir dir;
  test::write_raw(dir.file("small.txt"), "just a few words\nand a second line\n");
  std::string model = dir.file("m.model");
  EXPECT_ALPHA_ERROR(Tokenizer::train({dir.file("missing.txt")}, model), IOError, "missing.txt");
  EXPECT_ALPHA_ERROR(Tokenizer::train({dir.file("small.txt")}, model, {.vocab_size = 70000}), ConfigError,
                     "vocab_size", "65536", "70000");
  EXPECT_ALPHA_ERROR(Tokenizer::train({dir.file("small.txt")}, model, {.vocab_size = 100}), ConfigError,
                     "vocab_size", "100");
  EXPECT_ALPHA_ERROR(Tokenizer::train({dir.file("small.txt")}, model, {.vocab_size = 4096}), ConfigError,
                     "vocab_size", "small.txt", "4096");
  test::write_raw(dir.file("latin1.txt"), "caf\xE9 au lait\n");
  EXPECT_ALPHA_ERROR(Tokenizer::train({dir.file("latin1.txt")}, model, {.vocab_size = 300}), IOError,
                     "latin1.txt", "byte offset 3", "UTF-8");
  EXPECT_FALSE(std::filesystem::exists(model));
}

TEST(TokenizerLoad, ReportsMissingAndForeignFiles) {
  test::TempDir dir;
  EXPECT_ALPHA_ERROR(Tokenizer::load(dir.file("none.model")), IOError, "Tokenizer::load", "none.model");
  test::write_raw(dir.file("junk.model"), "this is not a model");
  EXPECT_ALPHA_ERROR(Tokenizer::load(dir.file("junk.model")), IOError, "junk.model");
}

}  // namespace
}  // namespace alpha::data
