// The built-in corpus: fixed text for a seed on every machine, its size, and its consistency.
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "alpha/data/builtin_corpus.h"

namespace alpha::data {
namespace {

uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001B3ull;
  return hash;
}

TEST(BuiltinCorpus, IsTheSameTextOnEveryMachine) {
  std::string text = builtin_corpus();
  // Pinned: a change here changes every model trained on the built-in corpus.
  EXPECT_EQ(fnv1a(text), 0xf26e063ac9a0bd56ull) << std::hex << fnv1a(text);
  EXPECT_EQ(text, builtin_corpus(0));
  EXPECT_NE(builtin_corpus(1, 10'000), builtin_corpus(2, 10'000));
  EXPECT_EQ(builtin_corpus(1, 10'000), builtin_corpus(1, 20'000).substr(0, builtin_corpus(1, 10'000).size()));
}

TEST(BuiltinCorpus, SizeAndShape) {
  std::string text = builtin_corpus();
  EXPECT_GE(text.size(), kBuiltinCorpusBytes);
  EXPECT_LT(text.size(), kBuiltinCorpusBytes + 2048);  // stops after the paragraph crossing the mark
  EXPECT_EQ(text.back(), '\n');
  EXPECT_TRUE(std::all_of(text.begin(), text.end(), [](char c) { return c == '\n' || (c >= ' ' && c <= '~'); }));
  EXPECT_EQ(text.find("\n\n\n"), std::string::npos);
  EXPECT_NE(text.find("Once upon a time"), std::string::npos);
  EXPECT_NE(text.find(" plus "), std::string::npos);
  EXPECT_NE(text.find("Let us count: "), std::string::npos);
}

TEST(BuiltinCorpus, FactsAreConsistent) {
  std::string text = builtin_corpus();
  // Every "A cat says X." in the corpus says the same X.
  const std::regex says("An? (\\w+) says (\\w+)\\.");
  std::map<std::string, std::set<std::string>> sounds;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), says); it != std::sregex_iterator(); ++it)
    sounds[(*it)[1]].insert((*it)[2]);
  EXPECT_GE(sounds.size(), 10u);
  for (const auto& [animal, heard] : sounds) EXPECT_EQ(heard.size(), 1u) << animal;
  // Sums are right: "Three plus four is seven."
  EXPECT_NE(text.find("Two plus two is four."), std::string::npos);
  EXPECT_EQ(text.find("Two plus two is five."), std::string::npos);
}

}  // namespace
}  // namespace alpha::data
