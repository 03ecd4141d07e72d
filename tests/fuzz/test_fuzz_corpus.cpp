// Every seed of the fuzz corpora (fuzz/corpus/<target>: the hostile inputs docs/SECURITY.md lists, and every
// input a fuzzer crashed on, named crash_*) through the file-reading entry points that the fuzz targets'
// parsers serve. Each must be read or rejected with a typed alpha::Error, never crash or raise anything
// else; under the `sanitize` preset (make sanitize) this also runs them under ASan and UBSan. Seeds named
// valid_* or real_* must be accepted. fuzz/make_seeds.py writes most seeds.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "alpha/core/error.h"
#include "alpha/core/file_io.h"
#include "alpha/core/json.h"
#include "alpha/dashboard/metrics_log.h"
#include "alpha/data/builtin_corpus.h"
#include "alpha/data/shard.h"
#include "alpha/data/tokenizer.h"
#include "alpha/nn/gpt_config.h"
#include "alpha/train/checkpoint.h"
#include "alpha/train/safetensors.h"
#include "alpha/train/train_config.h"
#include "core/file_test_util.h"

namespace alpha {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> seeds(const std::string& target) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(ALPHA_SOURCE_DIR) / "fuzz" / "corpus" / target))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool must_be_accepted(const fs::path& seed) {
  std::string name = seed.filename().string();
  return name.starts_with("valid_") || name.starts_with("real_");
}

// Runs `read` on every seed of `target`: it returns whether the seed was accepted, or throws. Only
// alpha::Error may escape (GoogleTest reports any other exception as a failure of the test).
void replay(const std::string& target, const std::function<bool(const fs::path&)>& read) {
  std::vector<fs::path> files = seeds(target);
  ASSERT_FALSE(files.empty()) << "no seeds in fuzz/corpus/" << target;
  int accepted = 0, rejected = 0;
  for (const fs::path& seed : files) {
    SCOPED_TRACE("fuzz/corpus/" + target + "/" + seed.filename().string());
    bool ok = false;
    try {
      ok = read(seed);
    } catch (const Error& e) {
      ok = false;
    }
    (ok ? accepted : rejected)++;
    if (must_be_accepted(seed)) {
      EXPECT_TRUE(ok) << "a valid_/real_ seed was rejected";
    }
  }
  EXPECT_GT(rejected, 0) << "the corpus holds no hostile input";
  EXPECT_GT(accepted, 0) << "the corpus holds no valid input";
}

TEST(FuzzCorpus, Safetensors) {
  replay("safetensors", [](const fs::path& seed) {
    // The file reader and the in-memory reader agree: both accept, or both raise IOError.
    std::string bytes = test::read_raw(seed);
    bool from_memory = true;
    try {
      train::read_safetensors_bytes(std::as_bytes(std::span(bytes)), seed.string());
    } catch (const IOError&) {
      from_memory = false;
    }
    try {
      train::read_safetensors(seed);
    } catch (const IOError&) {
      EXPECT_FALSE(from_memory);
      throw;
    }
    EXPECT_TRUE(from_memory);
    return true;
  });
}

TEST(FuzzCorpus, CheckpointState) {
  test::TempDir dir;
  replay("checkpoint_state", [&](const fs::path& seed) {
    fs::path step = dir / "step_00000001";
    fs::create_directories(step);
    fs::copy_file(seed, step / "state.json", fs::copy_options::overwrite_existing);
    // There is no model.safetensors: a state that passes stops there.
    try {
      train::load_checkpoint(step);
    } catch (const IOError& e) {
      if (std::string(e.what()).find("model.safetensors") != std::string::npos) return true;
      EXPECT_NE(std::string(e.what()).find("state.json"), std::string::npos) << e.what();
      throw;
    }
    ADD_FAILURE() << "loaded a checkpoint without model.safetensors";
    return false;
  });
}

TEST(FuzzCorpus, Shard) {
  replay("shard", [](const fs::path& seed) {
    data::ShardReader reader(seed.string(), data::kMaxVocabSize);
    for (uint16_t t : reader.tokens()) EXPECT_LT(t, data::kMaxVocabSize);
    return true;
  });
}

TEST(FuzzCorpus, TokenizerLoad) {
  replay("tokenizer_load", [](const fs::path& seed) {
    data::Tokenizer tok = data::Tokenizer::load(seed.string());
    const std::string text = "Once upon a time, \xE2\x96\x81 caf\xC3\xA9\n";
    std::vector<int32_t> ids = tok.encode(text);
    if (seed.filename().string().starts_with("valid_")) {
      EXPECT_EQ(tok.decode(ids), text);
    }
    return true;
  });
}

TEST(FuzzCorpus, TokenizerEncode) {
  test::TempDir dir;
  std::vector<std::string> texts = {data::builtin_corpus(1, 100'000)};
  data::Tokenizer tok = data::Tokenizer::train_on_texts(texts, dir.file("tok.model"), {.vocab_size = 400});
  std::vector<fs::path> files = seeds("tokenizer_encode");
  ASSERT_FALSE(files.empty());
  for (const fs::path& seed : files) {
    SCOPED_TRACE(seed.filename().string());
    std::string text = test::read_raw(seed);
    if (first_invalid_utf8(text)) {
      EXPECT_THROW(tok.encode(text), ValueError);
    } else {
      EXPECT_EQ(tok.decode(tok.encode(text)), text);
    }
  }
}

TEST(FuzzCorpus, Config) {
  replay("config", [](const fs::path& seed) {
    bool model = true, train = true;
    try {
      nn::load_gpt_config_file(seed);
    } catch (const ConfigError&) {
      model = false;
    }
    try {
      train::TrainConfig::from_json(parse_json(test::read_raw(seed)));
    } catch (const JsonParseError&) {
      train = false;  // not JSON (or with a comment): load_gpt_config_file has judged it
    } catch (const ConfigError&) {
      train = false;
    }
    return model || train;
  });
}

TEST(FuzzCorpus, MetricsLog) {
  // The reader is tolerant: it never throws; a hostile seed shows up as skipped lines.
  replay("metrics_log", [](const fs::path& seed) {
    dashboard::MetricsLog log = dashboard::read_metrics(seed);
    std::optional<int64_t> last = dashboard::last_step(seed);
    if (last) {
      EXPECT_FALSE(log.records.empty());
    }
    for (const auto& r : log.records) EXPECT_GT(r.at("step").get<int64_t>(), 0);
    return log.skipped_lines == 0;
  });
}

}  // namespace
}  // namespace alpha
