#include "alpha/data/builtin_corpus.h"

#include <array>
#include <span>
#include <string_view>
#include <utility>

#include "alpha/data/rng.h"

namespace alpha::data {
namespace {

struct Animal {
  std::string_view name, plural, sound, food, home;
};
// The world's fixed facts: every story and fact paragraph agrees with this table.
constexpr std::array<Animal, 12> kAnimals = {{
    {"cat", "cats", "meow", "fish", "a warm house"},
    {"dog", "dogs", "woof", "bones", "a little kennel"},
    {"cow", "cows", "moo", "grass", "a big barn"},
    {"duck", "ducks", "quack", "bread", "a quiet pond"},
    {"owl", "owls", "hoot", "mice", "a tall tree"},
    {"sheep", "sheep", "baa", "hay", "a green field"},
    {"frog", "frogs", "ribbit", "flies", "a muddy pond"},
    {"horse", "horses", "neigh", "oats", "a wooden stable"},
    {"pig", "pigs", "oink", "apples", "a muddy pen"},
    {"bee", "bees", "buzz", "nectar", "a golden hive"},
    {"mouse", "mice", "squeak", "cheese", "a tiny hole"},
    {"lion", "lions", "roar", "meat", "a sunny den"},
}};

struct Person {
  std::string_view name, subject, object, possessive;
};
constexpr std::array<Person, 16> kPeople = {{
    {"Lily", "she", "her", "her"},   {"Tom", "he", "him", "his"},     {"Mia", "she", "her", "her"},
    {"Ben", "he", "him", "his"},     {"Anna", "she", "her", "her"},   {"Sam", "he", "him", "his"},
    {"Sara", "she", "her", "her"},   {"Max", "he", "him", "his"},     {"Emma", "she", "her", "her"},
    {"Leo", "he", "him", "his"},     {"Zoe", "she", "her", "her"},    {"Jack", "he", "him", "his"},
    {"Lucy", "she", "her", "her"},   {"Finn", "he", "him", "his"},    {"Rosa", "she", "her", "her"},
    {"Noah", "he", "him", "his"},
}};

constexpr std::array<std::string_view, 8> kSizes = {"little", "big", "tiny", "small", "fluffy", "old", "young", "happy"};
constexpr std::array<std::string_view, 8> kColors = {"red", "blue", "green", "yellow", "brown", "white", "black", "pink"};
constexpr std::array<std::string_view, 10> kObjects = {"ball", "kite", "hat", "box", "book", "cup", "key", "drum", "boat", "bell"};
constexpr std::array<std::string_view, 8> kPlaces = {"park", "garden", "forest", "beach", "market", "river", "hill", "school"};
constexpr std::array<std::string_view, 8> kActivities = {
    "play in the sun", "run very fast", "sing a song", "look at the clouds",
    "jump over rocks", "read a book", "dance in the rain", "draw pictures"};
constexpr std::array<std::string_view, 6> kFeelings = {"happy", "sad", "scared", "excited", "tired", "proud"};
constexpr std::array<std::string_view, 21> kNumbers = {
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};

template <class T>
const T& pick(SplitMix64& rng, std::span<const T> items) {
  return items[rng.below(items.size())];
}
template <class T, size_t N>
const T& pick(SplitMix64& rng, const std::array<T, N>& items) {
  return pick(rng, std::span<const T>(items));
}

std::string capitalized(std::string_view word) {
  std::string out(word);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = char(out[0] - 'a' + 'A');
  return out;
}

std::string article(std::string_view word) {
  return (word[0] == 'a' || word[0] == 'e' || word[0] == 'i' || word[0] == 'o' || word[0] == 'u') ? "an" : "a";
}

// A story that follows a child and a pet through finding, losing or sharing an object.
void append_story(SplitMix64& rng, std::string& out) {
  const Person& hero = pick(rng, kPeople);
  const Person* friend_ = &pick(rng, kPeople);
  while (friend_->name == hero.name) friend_ = &pick(rng, kPeople);
  const Animal& pet = pick(rng, kAnimals);
  std::string_view size = pick(rng, kSizes), color = pick(rng, kColors), object = pick(rng, kObjects);
  std::string_view place = pick(rng, kPlaces), activity = pick(rng, kActivities);
  std::string he = std::string(hero.subject), He = capitalized(hero.subject);
  std::string pet_name = "the " + std::string(pet.name);

  out += "Once upon a time, there was " + article(size) + " " + std::string(size) + " " + std::string(pet.name) +
         ". The " + std::string(pet.name) + " lived in " + std::string(pet.home) + " with " +
         std::string(hero.name) + ". Every day, " + std::string(hero.name) + " and " + pet_name +
         " liked to " + std::string(activity) + ".\n";
  switch (rng.below(3)) {
    case 0: {  // lost and found
      out += "One day, " + std::string(hero.name) + " lost " + std::string(hero.possessive) + " " +
             std::string(color) + " " + std::string(object) + " at the " + std::string(place) + ". " + He +
             " was very sad. \"Where is my " + std::string(object) + "?\" " + he + " asked.\n";
      out += capitalized(pet_name) + " said, \"" + capitalized(pet.sound) + "!\" and ran to the " +
             std::string(place) + ". Soon " + pet_name + " came back with the " + std::string(color) + " " +
             std::string(object) + ". " + std::string(hero.name) + " was happy again. " + He + " gave " +
             pet_name + " some " + std::string(pet.food) + ".\n";
      break;
    }
    case 1: {  // sharing with a friend
      out += "One day, " + std::string(hero.name) + " went to the " + std::string(place) + " and met " +
             std::string(friend_->name) + ". " + std::string(friend_->name) + " looked " +
             std::string(pick(rng, kFeelings)) + ". \"Can I play with your " + std::string(object) + "?\" " +
             std::string(friend_->subject) + " asked.\n";
      out += std::string(hero.name) + " thought for a moment. Then " + he + " said, \"Yes, let us share the " +
             std::string(color) + " " + std::string(object) + ".\" " + std::string(hero.name) + " and " +
             std::string(friend_->name) + " played all day, and " + pet_name + " said, \"" +
             capitalized(pet.sound) + "!\"\n";
      break;
    }
    default: {  // a problem solved by the pet
      out += "One day, it was cold and " + pet_name + " was hungry. \"" + capitalized(pet.sound) + ", " +
             std::string(pet.sound) + "!\" said " + pet_name + ". " + std::string(hero.name) +
             " looked in the kitchen, but there was no " + std::string(pet.food) + ".\n";
      out += std::string(hero.name) + " took " + std::string(hero.possessive) + " " + std::string(object) +
             " and walked to the " + std::string(place) + ". There " + he + " found some " +
             std::string(pet.food) + ". " + capitalized(pet_name) + " ate the " + std::string(pet.food) +
             " and was " + std::string(pick(rng, kFeelings)) + ".\n";
      break;
    }
  }
  out += "From that day on, " + std::string(hero.name) + " and " + pet_name + " were best friends. The end.\n";
}

// Facts about a few animals of the world, always the same facts for the same animal.
void append_facts(SplitMix64& rng, std::string& out) {
  size_t count = 2 + rng.below(3);
  for (size_t i = 0; i < count; ++i) {
    const Animal& a = pick(rng, kAnimals);
    std::string Plural = capitalized(a.plural);
    switch (rng.below(3)) {
      case 0: out += "What does " + article(a.name) + " " + std::string(a.name) + " say? " +
                     capitalized(article(a.name)) + " " + std::string(a.name) + " says " + std::string(a.sound) + ". "; break;
      case 1: out += Plural + " like to eat " + std::string(a.food) + ". "; break;
      default: out += capitalized(article(a.name)) + " " + std::string(a.name) + " lives in " + std::string(a.home) + ". ";
    }
  }
  out.back() = '\n';
}

// Counting and sums in words, e.g. "Three plus four is seven."
void append_numbers(SplitMix64& rng, std::string& out) {
  if (rng.below(2) == 0) {
    size_t start = rng.below(15), length = 3 + rng.below(4);
    out += "Let us count: ";
    for (size_t n = start; n < start + length; ++n) out += std::string(kNumbers[n]) + (n + 1 < start + length ? ", " : ".\n");
    return;
  }
  size_t count = 2 + rng.below(3);
  for (size_t i = 0; i < count; ++i) {
    size_t a = rng.below(11), b = rng.below(11);
    if (rng.below(2) == 0) {
      out += capitalized(kNumbers[a]) + " plus " + std::string(kNumbers[b]) + " is " + std::string(kNumbers[a + b]) + ". ";
    } else {
      if (a < b) std::swap(a, b);
      out += capitalized(kNumbers[a]) + " minus " + std::string(kNumbers[b]) + " is " + std::string(kNumbers[a - b]) + ". ";
    }
  }
  out.back() = '\n';
}

}  // namespace

std::string builtin_corpus(uint64_t seed, size_t min_bytes) {
  SplitMix64 rng(seed);
  std::string out;
  out.reserve(min_bytes + 1024);
  while (out.size() < min_bytes) {
    if (!out.empty()) out += '\n';  // a blank line between paragraphs
    uint64_t kind = rng.below(10);
    if (kind < 6) append_story(rng, out);
    else if (kind < 8) append_facts(rng, out);
    else append_numbers(rng, out);
  }
  return out;
}

}  // namespace alpha::data
