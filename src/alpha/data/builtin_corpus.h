// A built-in training text that needs no files and no network: short children's stories, facts
// about a small fixed world (what each animal says, eats and where it lives) and counting and sums
// in words. Its structure and repetition let a small GPT visibly learn within minutes (names carried
// through a story, pronouns agreeing, consistent facts, arithmetic). The generator uses SplitMix64
// only, so the text is the same for the same seed on every machine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace alpha::data {

inline constexpr size_t kBuiltinCorpusBytes = size_t(1) << 20;

// Paragraphs separated by blank lines, generated until the text holds at least min_bytes (it ends
// with the paragraph that crosses the mark). ASCII only.
std::string builtin_corpus(uint64_t seed = 0, size_t min_bytes = kBuiltinCorpusBytes);

}  // namespace alpha::data
