// `prepare` end to end on temporary folders, and the `alpha prepare` / `alpha tokenizer` commands.
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "alpha/core/file_io.h"
#include "alpha/data/builtin_corpus.h"
#include "alpha/data/prepare.h"
#include "alpha/data/shard.h"
#include "alpha/data/tokenizer.h"
#include "core/file_test_util.h"
#include "support/checks.h"

namespace alpha::data {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, std::string_view text) {
  fs::create_directories(path.parent_path());
  test::write_raw(path, text);
}

std::vector<uint16_t> read_all(const std::vector<std::string>& shards, int vocab) {
  std::vector<uint16_t> tokens;
  for (const auto& path : shards) {
    ShardReader reader(path, vocab);
    tokens.insert(tokens.end(), reader.tokens().begin(), reader.tokens().end());
  }
  return tokens;
}

// Three documents in a folder (one nested) and one named directly.
class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    docs = {builtin_corpus(11, 30'000), builtin_corpus(12, 20'000), "A short one.\n", builtin_corpus(13, 25'000)};
    write_text(dir.path() / "in" / "a.txt", docs[0]);
    write_text(dir.path() / "in" / "sub" / "b.txt", docs[1]);
    write_text(dir.path() / "in" / "c.txt", docs[2]);
    write_text(dir.path() / "in" / "notes.md", "not a .txt file, skipped");
    write_text(dir.path() / "d.txt", docs[3]);
  }
  PrepareOptions options() const {
    // Folder files come sorted: a.txt, c.txt, sub/b.txt.
    return {.inputs = {dir.file("in"), dir.file("d.txt")}, .out_dir = dir.file("out"), .vocab_size = 400,
            .shard_tokens = 5000};
  }
  std::vector<std::string> docs;
  test::TempDir dir;
};

TEST_F(PrepareTest, WritesShardsThatDecodeBackToTheDocuments) {
  PrepareResult result = prepare(options());
  EXPECT_EQ(result.documents, 4);
  EXPECT_EQ(result.tokenizer_path, dir.file("out/tokenizer.model"));
  Tokenizer tok = Tokenizer::load(result.tokenizer_path);
  EXPECT_EQ(tok.vocab_size(), 400);

  auto train = read_all(result.train_shards, 400), val = read_all(result.val_shards, 400);
  EXPECT_EQ(int64_t(train.size()), result.train_tokens);
  EXPECT_EQ(int64_t(val.size()), result.val_tokens);
  ASSERT_GT(result.train_shards.size(), 1u);  // 5000 tokens per shard
  for (size_t i = 0; i < result.train_shards.size(); ++i) {
    EXPECT_EQ(result.train_shards[i], dir.file("out/" + std::string(i < 10 ? "train_00000" : "train_0000") +
                                               std::to_string(i) + ".bin"));
    if (i + 1 < result.train_shards.size()) {
      EXPECT_EQ(ShardReader(result.train_shards[i], 400).size(), 5000u);
    }
  }
  EXPECT_EQ(result.val_shards.front(), dir.file("out/val_000000.bin"));

  // Each split holds every document (in input order) after an end-of-text token: the train part the
  // first 90% of its tokens, the validation part the rest.
  const std::vector<std::string> in_order = {docs[0], docs[2], docs[1], docs[3]};
  size_t t = 0, v = 0;
  for (const auto& doc : in_order) {
    auto ids = tok.encode(doc);
    size_t n_val = size_t(std::llround(0.1 * double(ids.size())));
    ASSERT_EQ(train.at(t++), tok.eot_id());
    for (size_t i = 0; i < ids.size() - n_val; ++i) ASSERT_EQ(train.at(t++), ids[i]);
    if (n_val == 0) continue;
    ASSERT_EQ(val.at(v++), tok.eot_id());
    for (size_t i = ids.size() - n_val; i < ids.size(); ++i) ASSERT_EQ(val.at(v++), ids[i]);
  }
  EXPECT_EQ(t, train.size());
  EXPECT_EQ(v, val.size());
}

TEST_F(PrepareTest, IsDeterministicAndRemovesStaleShards) {
  PrepareResult first = prepare(options());
  std::string first_bytes = read_file(first.train_shards[0], "test");
  write_shard(dir.file("out/train_000099.bin"), std::vector<uint16_t>{1, 2, 3});  // left by a bigger run
  PrepareOptions again = options();
  again.tokenizer_path = first.tokenizer_path;  // reuse the tokenizer in place
  again.vocab_size.reset();
  PrepareResult second = prepare(again);
  EXPECT_EQ(second.train_shards, first.train_shards);
  EXPECT_EQ(read_file(second.train_shards[0], "test"), first_bytes);
  EXPECT_FALSE(fs::exists(dir.file("out/train_000099.bin")));
}

TEST_F(PrepareTest, UsesAGivenTokenizerAndCopiesIt) {
  std::vector<std::string> texts = {builtin_corpus(20, 30'000)};
  Tokenizer tok = Tokenizer::train_on_texts(texts, dir.file("mine.model"), {.vocab_size = 350});
  PrepareOptions o = options();
  o.tokenizer_path = dir.file("mine.model");
  o.vocab_size.reset();
  o.val_fraction = 0;
  PrepareResult result = prepare(o);
  EXPECT_EQ(Tokenizer::load(result.tokenizer_path).vocab_size(), 350);
  EXPECT_TRUE(result.val_shards.empty());
  EXPECT_EQ(result.val_tokens, 0);
  EXPECT_EQ(read_all(result.train_shards, 350).front(), tok.eot_id());
}

TEST_F(PrepareTest, BuiltinCorpusNeedsNoFiles) {
  PrepareResult result = prepare({.builtin_corpus = true, .out_dir = dir.file("b")});
  EXPECT_EQ(result.documents, 1);
  EXPECT_EQ(Tokenizer::load(result.tokenizer_path).vocab_size(), 1024);
  EXPECT_GT(result.train_tokens, 100'000);
  EXPECT_NEAR(double(result.val_tokens) / double(result.train_tokens + result.val_tokens), 0.1, 0.001);
}

TEST_F(PrepareTest, RejectsInvalidUtf8WithFileAndOffset) {
  write_text(dir.path() / "in" / "bad.txt", "fine text\nthen caf\xE9 au lait\n");
  PrepareOptions o = options();
  EXPECT_ALPHA_ERROR(prepare(o), IOError, "bad.txt", "byte offset 18", "UTF-8");
  // With a given tokenizer the check happens while tokenizing.
  std::vector<std::string> texts = {builtin_corpus(20, 30'000)};
  Tokenizer::train_on_texts(texts, dir.file("mine.model"), {.vocab_size = 350});
  o.tokenizer_path = dir.file("mine.model");
  o.vocab_size.reset();
  EXPECT_ALPHA_ERROR(prepare(o), IOError, "[prepare]", "bad.txt", "byte offset 18", "UTF-8");
}

TEST_F(PrepareTest, RejectsBadOptions) {
  PrepareOptions o = options();
  o.val_fraction = 1.0;
  EXPECT_ALPHA_ERROR(prepare(o), ConfigError, "prepare", "val_fraction");
  o = options();
  o.shard_tokens = 0;
  EXPECT_ALPHA_ERROR(prepare(o), ConfigError, "shard_tokens");
  o = options();
  o.inputs = {dir.file("nowhere")};
  EXPECT_ALPHA_ERROR(prepare(o), IOError, "nowhere");
  o.inputs = {dir.file("out")};
  fs::create_directories(dir.file("out"));
  EXPECT_ALPHA_ERROR(prepare(o), ConfigError, "inputs", ".txt");
  o = options();
  o.builtin_corpus = true;
  EXPECT_ALPHA_ERROR(prepare(o), ConfigError, "inputs", "both");
  o = options();
  o.tokenizer_path = dir.file("any.model");
  EXPECT_ALPHA_ERROR(prepare(o), ConfigError, "vocab_size", "400");
}

TEST_F(PrepareTest, CommandLine) {
  std::string out, err;
  EXPECT_EQ(test::run_alpha("tokenizer train --input " + dir.file("in") + " --vocab 400 --out " + dir.file("t.model"), dir,
                      out, err), 0) << err;
  EXPECT_EQ(Tokenizer::load(dir.file("t.model")).vocab_size(), 400);
  EXPECT_EQ(test::run_alpha("prepare --input " + dir.file("in") + " --input " + dir.file("d.txt") + " --tokenizer " +
                          dir.file("t.model") + " --out " + dir.file("cli") + " --val-fraction 0.2",
                      dir, out, err), 0) << err;
  EXPECT_NE(out.find("prepared 4 document(s)"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir.file("cli/train_000000.bin")));
  EXPECT_TRUE(fs::exists(dir.file("cli/val_000000.bin")));
  EXPECT_TRUE(fs::exists(dir.file("cli/tokenizer.model")));

  write_text(dir.path() / "bad.txt", "ok\xFF");
  EXPECT_EQ(test::run_alpha("prepare --input " + dir.file("bad.txt") + " --out " + dir.file("cli2"), dir, out, err), 1);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("bad.txt' at byte offset 2"), std::string::npos) << err;
  EXPECT_NE(test::run_alpha("prepare --input x --tokenizer t --vocab 10 --out o", dir, out, err), 0);  // excluded pair
  EXPECT_NE(err.find("excludes"), std::string::npos) << err;
}

}  // namespace
}  // namespace alpha::data
