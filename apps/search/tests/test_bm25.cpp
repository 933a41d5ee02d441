// The lexical half of qkv search without a model: BM25's terms, its index in the index file
// (round trip, and damage refused), and reciprocal rank fusion against hand computations.
// BM25's scores are checked against a naive twin in tests/python/test_search_quality.py.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/safetensors.h"
#include "search/bm25.h"
#include "search/search.h"

namespace {

using qkv::Bm25Index;
using Terms = std::vector<std::string>;

TEST(Bm25, TermsAreLowercaseRunsOfLettersAndDigitsWithoutPlurals) {
  EXPECT_EQ(qkv::lexical_terms("Edit PHOTOS, files & MP3s!"), (Terms{"edit", "photo", "file", "mp3"}));
  // Harman's S stemmer: ies -> y (not aies, eies); es -> e (not aes, ees, oes); s -> "" (not us, ss).
  EXPECT_EQ(qkv::lexical_terms("libraries the_series toes bees class gnus is its"),
            (Terms{"library", "the", "sery", "toe", "bee", "class", "gnus", "is", "it"}));
  EXPECT_EQ(qkv::lexical_terms("Ünïcode—ÄÖ x²"), (Terms{"ünïcode", "äö", "x²"}));
  EXPECT_EQ(qkv::lexical_terms(" ... --- "), Terms{});
  EXPECT_THROW(qkv::lexical_terms("bad \xff byte"), qkv::Error);
}

TEST(Bm25, AQueryWithoutTermsIsAnErrorAndAnUnknownTermMatchesNothing) {
  const Bm25Index index = Bm25Index::build({"a spreadsheet", "", "a player"});
  EXPECT_EQ(index.documents(), 2);
  EXPECT_DOUBLE_EQ(index.average_length(), 2.0);
  try {
    index.rank("?!");
    FAIL() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no terms"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(index.rank("zebra").empty());
  // One document holds "spreadsheet": idf ln(1 + (2 - 1 + 0.5) / 1.5) = ln 2, |D| = avgdl.
  const auto ranked = index.rank("spreadsheets");
  ASSERT_EQ(ranked.size(), 1u);
  EXPECT_EQ(ranked[0].second, 0);
  EXPECT_NEAR(ranked[0].first, std::log(2.0) * 2.2 / (1 + 1.2), 1e-15);
}

// The five tensors and the "lexical" metadata read back as the same index; anything that
// disagrees is refused as damage, and a file without them reads as "no lexical part".
TEST(Bm25, TheIndexFileRoundTripsAndDamageIsRefused) {
  const std::vector<std::string> lines = {"play music files", "", "music player for files and music", "!!"};
  const Bm25Index index = Bm25Index::build(lines);
  const auto image = [&](std::vector<std::pair<std::string, qkv::RawTensor>> raw, const char* version) {
    std::map<std::string, std::string> meta;
    if (version != nullptr) meta["lexical"] = version;
    return qkv::SafeTensors::parse(qkv::serialize_safetensors({}, meta, raw));
  };
  Bm25Index back;
  ASSERT_TRUE(Bm25Index::read(image(index.tensors(), Bm25Index::kTermsVersion), 4, "index 'x'", &back));
  EXPECT_EQ(back.rank("music files"), index.rank("music files"));
  EXPECT_EQ(back.vocabulary(), 6);  // and, file, for, music, play, player: "play" and "player" differ
  EXPECT_EQ(back.memory_bytes(), index.memory_bytes());

  EXPECT_FALSE(Bm25Index::read(image({}, nullptr), 4, "index 'x'", &back));         // an older index
  EXPECT_FALSE(Bm25Index::read(image(index.tensors(), "bm25/0"), 4, "index 'x'", &back));  // other rules
  const auto expect_damaged = [&](std::vector<std::pair<std::string, qkv::RawTensor>> raw, std::int64_t n,
                                  const std::string& needle) {
    try {
      Bm25Index::read(image(std::move(raw), Bm25Index::kTermsVersion), n, "index 'x'", &back);
      FAIL() << "no error for " << needle;
    } catch (const qkv::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("index 'x' is damaged"), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_NE(what.find("--reindex"), std::string::npos) << what;
    }
  };
  expect_damaged(index.tensors(), 5, "bm25.lengths");  // another corpus' line count
  auto tensors = index.tensors();
  tensors.pop_back();  // no bm25.lengths
  expect_damaged(tensors, 4, "no tensor bm25.lengths");
  tensors = index.tensors();
  tensors[2].second.data[0] = std::byte{3};  // the first posting's line: 3 holds no term
  expect_damaged(tensors, 4, "disagree");
  tensors = index.tensors();
  tensors[0].second.data[0] = std::byte{'z'};  // the terms are no longer sorted
  expect_damaged(tensors, 4, "sorted");
}

// Cormack et al.'s RRF with k = 60, by hand: rankings [3, 1, 2] and [1, 4].
TEST(Rrf, FusesRanksAsTheHandComputationDoes) {
  const auto fused = qkv::reciprocal_rank_fusion({{3, 1, 2}, {1, 4}});
  ASSERT_EQ(fused.size(), 4u);
  // 1: 1/62 + 1/61; 3: 1/61; 4: 1/62; 2: 1/63. Ties (none here) in item order.
  EXPECT_EQ(fused[0].second, 1);
  EXPECT_DOUBLE_EQ(fused[0].first, 1.0 / 62 + 1.0 / 61);
  EXPECT_EQ(fused[1].second, 3);
  EXPECT_DOUBLE_EQ(fused[1].first, 1.0 / 61);
  EXPECT_EQ(fused[2].second, 4);
  EXPECT_DOUBLE_EQ(fused[2].first, 1.0 / 62);
  EXPECT_EQ(fused[3].second, 2);
  EXPECT_DOUBLE_EQ(fused[3].first, 1.0 / 63);
  // Equal scores go in item order; k changes the scores.
  const auto ties = qkv::reciprocal_rank_fusion({{9, 5}, {5, 9}}, 1);
  ASSERT_EQ(ties.size(), 2u);
  EXPECT_EQ(ties[0].second, 5);
  EXPECT_DOUBLE_EQ(ties[0].first, 1.0 / 2 + 1.0 / 3);
  EXPECT_TRUE(qkv::reciprocal_rank_fusion({}).empty());
}

}  // namespace
