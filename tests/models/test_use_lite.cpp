// The Universal Sentence Encoder lite (UseLiteModel) and semantic search (SearchIndex) on
// the real model, against its published pipeline: @energetic-ai/embeddings 0.2.0 on
// TensorFlow.js's WebAssembly backend, run by fetch_use_lite.sh (ctest fixture use_lite)
// on every string of use_corpus.json. $QKV_TEST_USE_DIR is the converted model,
// $QKV_TEST_USE_REFERENCE the pipeline's [{"text", "ids", "embedding"}].
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"
#include "search/search.h"
#include "qkv/use_lite.h"

namespace {

namespace fs = std::filesystem;
using qkv::Tensor;
using qkv::models::UseLiteModel;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    ADD_FAILURE() << name << " is not set: run through ctest (fixture use_lite)";
    return {};
  }
  return v;
}

struct Reference {
  std::string text;
  std::vector<std::int64_t> ids;
  std::vector<double> embedding;  // 512, the pipeline's f32 values
};

const std::vector<Reference>& reference() {
  static const std::vector<Reference> r = [] {
    std::ifstream in(env("QKV_TEST_USE_REFERENCE"));
    const nlohmann::json j = nlohmann::json::parse(in);
    std::vector<Reference> out;
    for (const auto& e : j)
      out.push_back({e.at("text").get<std::string>(), e.at("ids").get<std::vector<std::int64_t>>(),
                     e.at("embedding").get<std::vector<double>>()});
    return out;
  }();
  return r;
}

const UseLiteModel& model() {
  static const UseLiteModel m = UseLiteModel::load(env("QKV_TEST_USE_DIR"));
  return m;
}

std::vector<std::string> texts() {
  std::vector<std::string> t;
  for (const Reference& r : reference()) t.push_back(r.text);
  return t;
}

using qkv::testing::TempDir;

void copy_model(const fs::path& to) {
  fs::create_directories(to);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(fs::path(env("QKV_TEST_USE_DIR")) / f, to / f, fs::copy_options::overwrite_existing);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(UseLite, CorpusCoversWhatTheTestNeeds) {
  const auto& r = reference();
  ASSERT_GE(r.size(), 200u);
  const auto longer = std::count_if(r.begin(), r.end(), [](const Reference& e) { return e.ids.size() > 128; });
  const auto one_word = std::count_if(r.begin(), r.end(), [](const Reference& e) {
    return !e.text.empty() && e.text.find(' ') == std::string::npos && e.ids.size() <= 3;
  });
  const auto unknown = std::count_if(r.begin(), r.end(), [](const Reference& e) {
    return std::find(e.ids.begin(), e.ids.end(), 0) != e.ids.end();
  });
  const auto non_ascii = std::count_if(r.begin(), r.end(), [](const Reference& e) {
    return std::any_of(e.text.begin(), e.text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
  });
  EXPECT_GE(longer, 20) << "inputs longer than the model's 128 tokens";
  EXPECT_GE(one_word, 10);
  EXPECT_GE(unknown, 5) << "inputs with pieces outside the vocabulary";
  EXPECT_GE(non_ascii, 40);
}

// The tokenizer's ids, clipped to 128 as the graph clips them, are the ids the model reads.
TEST(UseLite, EncodeIsThePipelinesIdsClipped) {
  for (const Reference& r : reference()) {
    bool clipped = false;
    const std::vector<std::int64_t> ids = model().encode(r.text, &clipped);
    std::vector<std::int64_t> want = r.ids;
    if (want.size() > 128) want.resize(128);
    EXPECT_EQ(ids, want) << r.text;
    EXPECT_EQ(clipped, r.ids.size() > 128) << r.text;
  }
}

// Every embedding within 1e-5 (absolute, per element) of the pipeline's, in batches of 64
// sentences of mixed lengths (so padding through key lengths is exercised) and one at a
// time; the two agree far closer than that.
TEST(UseLite, EmbeddingsEqualThePublishedPipeline) {
  const auto& r = reference();
  const Tensor batched = model().embed(texts(), false, 64).embeddings;  // (N, 512)
  ASSERT_EQ(batched.shape(), (qkv::Shape{static_cast<std::int64_t>(r.size()), 512}));
  double worst = 0;
  std::size_t worst_i = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    ASSERT_EQ(r[i].embedding.size(), 512u) << r[i].text;
    for (std::size_t k = 0; k < 512; ++k) {
      const double d = std::abs(batched.data_as<float>()[i * 512 + k] - r[i].embedding[k]);
      if (d > worst) worst = d, worst_i = i;
    }
  }
  EXPECT_LT(worst, 1e-5) << "largest difference on: " << r[worst_i].text;
  std::cout << "[ info ] " << r.size() << " sentences, max |qkv - pipeline| = " << worst << "\n";

  for (std::size_t i = 0; i < r.size(); i += 7) {  // one at a time
    const Tensor single = model().embed({r[i].text}, false, 1).embeddings;  // (1, 512)
    for (std::size_t k = 0; k < 512; ++k)
      ASSERT_NEAR(single.data_as<float>()[k], batched.data_as<float>()[i * 512 + k], 2e-6) << r[i].text;
  }
}

// Attention probabilities on request: one (H, n, n) tensor per layer for each input, rows
// summing to 1, and the embeddings unchanged by asking (the reference attention path).
TEST(UseLite, AttentionsOnRequest) {
  const std::vector<std::string> t = {"The cat sat on the mat.", "", "a much longer sentence, to pad the others"};
  const auto plain = model().embed(t);
  const auto with = model().embed(t, true);
  ASSERT_EQ(with.attentions.size(), 3u);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const auto n = static_cast<std::int64_t>(model().encode(t[i]).size());
    ASSERT_EQ(with.attentions[i].size(), 2u);
    for (const Tensor& a : with.attentions[i]) {
      ASSERT_EQ(a.shape(), (qkv::Shape{4, n, n})) << t[i];
      for (std::int64_t row = 0; row < 4 * n; ++row) {
        double sum = 0;
        for (std::int64_t j = 0; j < n; ++j) sum += a.data_as<float>()[row * n + j];
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
    for (std::int64_t k = 0; k < 512; ++k)
      EXPECT_NEAR(with.embeddings.data_as<float>()[i * 512 + k], plain.embeddings.data_as<float>()[i * 512 + k], 1e-6);
  }
  EXPECT_TRUE(plain.attentions.empty());
}

// Ids the model cannot read, and text that is not UTF-8.
TEST(UseLite, BadInputIsAnError) {
  EXPECT_THROW(model().embed_ids({{1, 8000}}), qkv::Error);
  EXPECT_THROW(model().embed_ids({{-1}}), qkv::Error);
  EXPECT_THROW(model().embed({"ok", std::string("bad \xff byte")}), qkv::Error);
  EXPECT_THROW(model().embed_ids({{5}}, false, 0), qkv::Error);
}

// A model directory that is missing a file, or whose files were altered, is refused with
// a message naming what is wrong.
TEST(UseLite, AlteredModelFilesAreRefused) {
  TempDir dir("altered");
  const fs::path m = dir.path / "m";
  auto expect_error = [&](const std::string& what, const std::string& needle) {
    try {
      UseLiteModel::load(m.string());
      ADD_FAILURE() << what << ": loaded";
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    }
  };
  const qkv::SafeTensors original = qkv::SafeTensors::open((fs::path(env("QKV_TEST_USE_DIR")) / "model.safetensors").string());
  auto rewrite = [&](const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& change) {
    copy_model(m);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& name : original.names()) tensors.emplace_back(name, original.get(name).clone());
    change(tensors);
    qkv::save_safetensors((m / "model.safetensors").string(), tensors);
  };

  copy_model(m);
  fs::remove(m / "model.safetensors");
  expect_error("no weights", "model.safetensors");
  copy_model(m);
  fs::remove(m / "tokenizer.json");
  expect_error("no tokenizer", "tokenizer.json");
  copy_model(m);
  write_text(m / "config.json", R"({"model_type": "bert"})");
  expect_error("another model_type", "use_lite");

  rewrite([](std::vector<std::pair<std::string, Tensor>>& t) {
    for (auto& [name, tensor] : t)
      if (name == "layers.1.linear1.weight") tensor = tensor.slice(0, 0, 1000).clone();
  });
  expect_error("a tensor of the wrong shape", "layers.1.linear1.weight");
  rewrite([](std::vector<std::pair<std::string, Tensor>>& t) { std::erase_if(t, [](const auto& e) { return e.first == "pooler.bias"; }); });
  expect_error("a missing tensor", "pooler.bias");
  rewrite([](std::vector<std::pair<std::string, Tensor>>& t) { t.emplace_back("classifier.weight", Tensor::zeros({2, 512})); });
  expect_error("a tensor of another model", "classifier.weight");
  rewrite([](std::vector<std::pair<std::string, Tensor>>& t) {
    for (auto& [name, tensor] : t)
      if (name == "layers.0.norm2.weight") tensor.data_as<float>()[7] = std::nanf("");
  });
  expect_error("a NaN", "layers.0.norm2.weight");
  copy_model(m);
  { std::ofstream(m / "model.safetensors", std::ios::binary | std::ios::trunc) << "short"; }
  expect_error("a damaged file", "model.safetensors");
}

// Search ranks the corpus by cosine similarity: the same order as ranking the pipeline's
// own embeddings of the corpus against the pipeline's embedding of the query, up to
// neighbours whose pipeline scores are within 2e-5 (where f32 rounding may swap them).
TEST(UseLite, SearchRanksAsThePipelinesEmbeddings) {
  TempDir dir("search");
  // The corpus: the reference's one-line, non-blank texts.
  std::vector<std::size_t> rows;  // reference row of each corpus line
  std::string corpus;
  for (std::size_t i = 0; i < reference().size(); ++i) {
    const std::string& t = reference()[i].text;
    if (t.find_first_of("\n\r") != std::string::npos || t.find_first_not_of(" \t") == std::string::npos) continue;
    if (t.find('\0') != std::string::npos) continue;
    rows.push_back(i);
    corpus += t + "\n";
  }
  const fs::path corpus_path = dir.path / "corpus.txt", index_path = dir.path / "corpus.idx";
  write_text(corpus_path, corpus);
  bool built = false;
  std::int64_t calls = 0;
  const qkv::SearchIndex index = qkv::SearchIndex::open_or_build(
      model(), env("QKV_TEST_USE_DIR"), corpus_path.string(), index_path.string(),
      [&](std::int64_t, std::int64_t) { ++calls; }, false, &built);
  EXPECT_TRUE(built);
  EXPECT_GE(calls, 2);
  ASSERT_TRUE(fs::exists(index_path));

  for (std::size_t q : {3u, 40u, 77u, 120u}) {
    const std::size_t query_row = rows[q % rows.size()];
    const auto& qe = reference()[query_row].embedding;
    std::vector<std::pair<double, std::size_t>> want;  // (pipeline score, corpus line index)
    for (std::size_t l = 0; l < rows.size(); ++l)
      want.emplace_back(std::inner_product(qe.begin(), qe.end(), reference()[rows[l]].embedding.begin(), 0.0), l);
    std::stable_sort(want.begin(), want.end(), [](auto& a, auto& b) { return a.first > b.first; });
    const auto hits = index.search(model(), reference()[query_row].text, 10);
    ASSERT_EQ(hits.size(), 10u);
    for (std::size_t r = 0; r < hits.size(); ++r) {
      EXPECT_EQ(hits[r].rank, static_cast<std::int64_t>(r) + 1);
      const std::size_t got = static_cast<std::size_t>(hits[r].line - 1);
      EXPECT_EQ(hits[r].text, reference()[rows[got]].text);
      EXPECT_NEAR(hits[r].score, want[r].first, 2e-5) << "rank " << r + 1;
      if (got != want[r].second)  // only a near-tie may swap
        EXPECT_NEAR(want[r].first, std::inner_product(qe.begin(), qe.end(), reference()[rows[got]].embedding.begin(), 0.0), 2e-5)
            << "rank " << r + 1 << " of query " << reference()[query_row].text;
    }
    EXPECT_NEAR(hits[0].score, 1.0, 1e-5);  // the query is a line of the corpus
  }
  EXPECT_THROW(index.search(model(), "x", 0), qkv::Error);
}

// The index file: reused while corpus and model are unchanged, rebuilt when the corpus
// changes, refused (not overwritten) when another model built it or when it is damaged.
TEST(UseLite, IndexFileIsReusedAndChecked) {
  TempDir dir("index");
  const fs::path corpus = dir.path / "c.txt", index = dir.path / "c.idx";
  const std::string model_dir = env("QKV_TEST_USE_DIR");
  write_text(corpus, "the weather is nice today\n\nI like pizza\nquantum physics lecture notes\n");
  bool built = false;
  auto open = [&](const std::string& m, bool rebuild = false) {
    return qkv::SearchIndex::open_or_build(model(), m, corpus.string(), index.string(), {}, rebuild, &built);
  };
  const auto first = open(model_dir);
  EXPECT_TRUE(built);
  EXPECT_EQ(first.lines().size(), 4u);
  const auto again = open(model_dir);
  EXPECT_FALSE(built);
  EXPECT_EQ(again.embeddings().to_vector(), first.embeddings().to_vector());
  const auto hits = again.search(model(), "food", 5);
  ASSERT_EQ(hits.size(), 3u);  // the blank line is never a hit
  EXPECT_EQ(hits[0].line, 3);  // "I like pizza"

  write_text(corpus, "I like pizza\nthe weather is nice today\n");
  const auto changed = open(model_dir);
  EXPECT_TRUE(built);
  EXPECT_EQ(changed.search(model(), "food", 1)[0].line, 1);

  // Another model: the same weights with another config.json byte for byte.
  const fs::path other = dir.path / "other";
  copy_model(other);
  { std::ofstream(other / "config.json", std::ios::app) << "\n"; }
  EXPECT_THROW(open(other.string()), qkv::Error);
  const auto rebuilt = open(other.string(), true);
  EXPECT_TRUE(built);
  EXPECT_THROW(open(model_dir), qkv::Error);  // now the index is the other model's

  open(model_dir, true);
  std::filesystem::resize_file(index, std::filesystem::file_size(index) / 2);
  EXPECT_THROW(open(model_dir), qkv::Error);  // damaged
  write_text(index, "not an index");
  EXPECT_THROW(open(model_dir), qkv::Error);

  write_text(corpus, "");
  EXPECT_THROW(open(model_dir, true), qkv::Error);  // an empty corpus
  write_text(corpus, "\n  \n\t\n");
  EXPECT_THROW(open(model_dir, true), qkv::Error);  // nothing but blank lines
  write_text(corpus, "fine\nnot \xc3\x28 utf-8\n");
  EXPECT_THROW(open(model_dir, true), qkv::Error);
}

// The lexical part: an index written before it (embeddings and metadata only, as qkv wrote
// them) gets it added, the embeddings kept and the file rewritten; lexical and hybrid
// rankings score what they say; a query without a word is refused by both.
TEST(UseLite, AnIndexWithoutItsLexicalPartGetsIt) {
  TempDir dir("lexical");
  const fs::path corpus = dir.path / "c.txt", index = dir.path / "c.idx";
  const std::string model_dir = env("QKV_TEST_USE_DIR");
  write_text(corpus, "gnumeric: spreadsheet application\n\nvlc: multimedia player\nchess: play chess\n");
  bool built = false, added = false;
  auto open = [&] {
    return qkv::SearchIndex::open_or_build(model(), model_dir, corpus.string(), index.string(), {}, false, &built,
                                           &added);
  };
  const auto first = open();
  EXPECT_TRUE(built);
  EXPECT_FALSE(added);
  EXPECT_TRUE(qkv::SafeTensors::open(index.string()).contains("bm25.lengths"));
  {  // the file as an older qkv wrote it
    const qkv::SafeTensors file = qkv::SafeTensors::open(index.string());
    std::map<std::string, std::string> meta = file.metadata();
    meta.erase("lexical");
    qkv::save_safetensors(index.string(), {{"embeddings", file.get("embeddings").clone()}}, meta);
  }
  EXPECT_FALSE(qkv::SafeTensors::open(index.string()).contains("bm25.lengths"));
  const auto upgraded = open();
  EXPECT_FALSE(built);
  EXPECT_TRUE(added);
  EXPECT_EQ(upgraded.embeddings().to_vector(), first.embeddings().to_vector());
  EXPECT_TRUE(qkv::SafeTensors::open(index.string()).contains("bm25.lengths"));
  const auto again = open();
  EXPECT_FALSE(built || added);

  const auto lexical = again.search(model(), "spreadsheets", 10, qkv::SearchRanking::lexical);
  ASSERT_EQ(lexical.size(), 1u);  // only line 1 holds the term
  EXPECT_EQ(lexical[0].line, 1);
  EXPECT_EQ(lexical[0].score, static_cast<float>(again.lexical().rank("spreadsheets")[0].first));
  const auto hybrid = again.search(model(), "play chess", 10, qkv::SearchRanking::hybrid);
  ASSERT_EQ(hybrid.size(), 3u);  // every non-blank line: the dense ranking holds them all
  EXPECT_EQ(hybrid[0].line, 4);  // first in both rankings: 2 / 61
  EXPECT_FLOAT_EQ(hybrid[0].score, 2.0f / 61);
  EXPECT_STREQ(qkv::score_name(qkv::SearchRanking::hybrid), "rrf");
  EXPECT_THROW(again.search(model(), "?!", 10, qkv::SearchRanking::lexical), qkv::Error);
  EXPECT_THROW(again.search(model(), "--", 10, qkv::SearchRanking::hybrid), qkv::Error);

  // A lexical part that disagrees with the corpus is damage, not an older index.
  {
    const qkv::SafeTensors file = qkv::SafeTensors::open(index.string());
    const auto other = qkv::Bm25Index::build({"one line", "two", "three"});  // 3 lines, not 4
    qkv::save_safetensors(index.string(), {{"embeddings", file.get("embeddings").clone()}}, file.metadata(),
                          other.tensors());
  }
  EXPECT_THROW(open(), qkv::Error);
}

}  // namespace
