// Bm25Index: terms, postings and BM25 scores of a corpus' lines (bm25.h has the formula).

#include "search/bm25.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "qkv/error.h"
#include "text/unicode.h"

namespace qkv {

namespace {

// Harman's S stemmer (bm25.h), on a lowercased term of 3 or more code points.
void strip_plural(std::u32string& w) {
  const std::size_t n = w.size();
  if (n < 3 || w[n - 1] != U's') return;
  const auto ends = [&](std::u32string_view tail) {
    return n >= tail.size() && std::u32string_view(w).substr(n - tail.size()) == tail;
  };
  if (ends(U"ies") && !ends(U"aies") && !ends(U"eies")) {
    w.replace(n - 3, 3, U"y");
  } else if (ends(U"es") && !ends(U"aes") && !ends(U"ees") && !ends(U"oes")) {
    w.pop_back();  // "es" -> "e"
  } else if (!ends(U"us") && !ends(U"ss")) {
    w.pop_back();
  }
}

std::vector<std::int32_t> read_i32(const SafeTensors& file, const std::string& name, std::int64_t n,
                                   const std::string& what) {
  const TensorInfo& info = file.info(name);
  std::string shape;
  for (const std::int64_t s : info.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(s);
  QKV_CHECK(info.dtype == "I32" && info.shape == Shape{n},
            what << " is damaged (" << name << " is " << info.dtype << " (" << shape << "), expected I32 (" << n
                 << ")): rebuild it (qkv search --reindex)");
  const auto bytes = file.bytes(name);
  std::vector<std::int32_t> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());  // may be unaligned
  return out;
}

template <class T>
RawTensor raw_i32(const std::vector<T>& values) {
  RawTensor r{"I32", {static_cast<std::int64_t>(values.size())}, std::vector<std::byte>(values.size() * 4)};
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto v = static_cast<std::int32_t>(values[i]);
    std::memcpy(r.data.data() + 4 * i, &v, 4);  // little-endian host, as the format
  }
  return r;
}

}  // namespace

std::vector<std::string> lexical_terms(std::string_view text) {
  const std::vector<char32_t> cps = text::decode_utf8(text, "lexical_terms");
  std::vector<std::string> terms;
  for (std::size_t i = 0; i < cps.size();) {
    if (!text::is_letter(cps[i]) && !text::is_number(cps[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && (text::is_letter(cps[j]) || text::is_number(cps[j]))) ++j;
    std::u32string word = text::to_lower(std::u32string_view(cps.data() + i, j - i));
    strip_plural(word);
    std::string utf8;
    for (const char32_t c : word) text::append_utf8(utf8, c);
    terms.push_back(std::move(utf8));
    i = j;
  }
  return terms;
}

Bm25Index Bm25Index::build(const std::vector<std::string>& lines) {
  QKV_CHECK(lines.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
            "BM25: " << lines.size() << " lines are more than the index's 2^31 - 1");
  // term -> its (line, count) postings; lines are visited in order, so each list ascends.
  std::map<std::string, std::vector<std::pair<std::int32_t, std::int32_t>>> postings;
  Bm25Index index;
  index.lengths_.reserve(lines.size());
  for (std::size_t d = 0; d < lines.size(); ++d) {
    std::vector<std::string> terms = lexical_terms(lines[d]);
    index.lengths_.push_back(static_cast<std::int32_t>(terms.size()));  // a line is at most 1 MiB
    std::sort(terms.begin(), terms.end());
    for (std::size_t i = 0; i < terms.size();) {
      std::size_t j = i;
      while (j < terms.size() && terms[j] == terms[i]) ++j;
      postings[terms[i]].emplace_back(static_cast<std::int32_t>(d), static_cast<std::int32_t>(j - i));
      i = j;
    }
  }
  index.starts_.push_back(0);
  for (auto& [term, list] : postings) {
    index.terms_.push_back(term);
    for (const auto& [line, count] : list) {
      index.lines_.push_back(line);
      index.counts_.push_back(count);
    }
    index.starts_.push_back(static_cast<std::int64_t>(index.lines_.size()));
  }
  index.finish();
  return index;
}

void Bm25Index::finish() {
  documents_ = 0;
  double total = 0;
  for (const std::int32_t n : lengths_) {
    documents_ += n > 0;
    total += n;
  }
  average_length_ = documents_ > 0 ? total / static_cast<double>(documents_) : 0;
}

std::vector<std::pair<std::string, RawTensor>> Bm25Index::tensors() const {
  RawTensor terms{"U8", {}, {}};
  for (const std::string& t : terms_) {
    for (const char c : t) terms.data.push_back(static_cast<std::byte>(c));
    terms.data.push_back(std::byte{'\n'});
  }
  terms.shape = {static_cast<std::int64_t>(terms.data.size())};
  std::vector<std::int64_t> per_term;
  for (std::size_t t = 0; t < terms_.size(); ++t) per_term.push_back(starts_[t + 1] - starts_[t]);
  return {{"bm25.terms", std::move(terms)},
          {"bm25.postings", raw_i32(per_term)},
          {"bm25.lines", raw_i32(lines_)},
          {"bm25.counts", raw_i32(counts_)},
          {"bm25.lengths", raw_i32(lengths_)}};
}

bool Bm25Index::read(const SafeTensors& file, std::int64_t lines, const std::string& what, Bm25Index* out) {
  const auto it = file.metadata().find("lexical");
  if (it == file.metadata().end() || it->second != kTermsVersion) return false;
  const auto damaged = [&](const std::string& why) {
    return Error(what + " is damaged (" + why + "): rebuild it (qkv search --reindex)");
  };
  for (const char* name : {"bm25.terms", "bm25.postings", "bm25.lines", "bm25.counts", "bm25.lengths"})
    if (!file.contains(name)) throw damaged(std::string("no tensor ") + name);
  Bm25Index index;
  const TensorInfo& terms = file.info("bm25.terms");
  if (terms.dtype != "U8" || terms.shape.size() != 1) throw damaged("bm25.terms is not a U8 vector");
  const auto bytes = file.bytes("bm25.terms");
  const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (!all.empty() && all.back() != '\n') throw damaged("bm25.terms does not end with a newline");
  for (std::size_t i = 0; i < all.size();) {
    const std::size_t end = all.find('\n', i);
    std::string term(all.substr(i, end - i));
    if (term.empty() || (!index.terms_.empty() && !(index.terms_.back() < term)))
      throw damaged("bm25.terms are not unique, sorted and non-empty");
    index.terms_.push_back(std::move(term));
    i = end + 1;
  }
  const std::vector<std::int32_t> per_term =
      read_i32(file, "bm25.postings", static_cast<std::int64_t>(index.terms_.size()), what);
  index.starts_.push_back(0);
  for (const std::int32_t n : per_term) {
    if (n < 1) throw damaged("a term of bm25.postings is in no line");
    index.starts_.push_back(index.starts_.back() + n);
  }
  index.lines_ = read_i32(file, "bm25.lines", index.starts_.back(), what);
  index.counts_ = read_i32(file, "bm25.counts", index.starts_.back(), what);
  index.lengths_ = read_i32(file, "bm25.lengths", lines, what);
  // Every posting names a line of the corpus, once per term, and the counts of a line's
  // postings add up to its length: an index whose numbers disagree is refused.
  std::vector<std::int64_t> sums(index.lengths_.size(), 0);
  for (std::size_t t = 0; t < index.terms_.size(); ++t)
    for (std::int64_t p = index.starts_[t]; p < index.starts_[t + 1]; ++p) {
      const std::int32_t line = index.lines_[static_cast<std::size_t>(p)];
      const std::int32_t count = index.counts_[static_cast<std::size_t>(p)];
      if (line < 0 || line >= lines || count < 1 ||
          (p > index.starts_[t] && line <= index.lines_[static_cast<std::size_t>(p - 1)]))
        throw damaged("bm25.lines or bm25.counts out of order or range");
      sums[static_cast<std::size_t>(line)] += count;
    }
  for (std::size_t d = 0; d < sums.size(); ++d)
    if (sums[d] != index.lengths_[d]) throw damaged("bm25.lengths disagree with bm25.counts");
  index.finish();
  *out = std::move(index);
  return true;
}

std::vector<std::pair<double, std::int64_t>> Bm25Index::rank(std::string_view query) const {
  std::vector<std::string> q = lexical_terms(query);
  QKV_CHECK(!q.empty(), "BM25: the query has no terms (runs of letters or digits) to match");
  std::sort(q.begin(), q.end());
  q.erase(std::unique(q.begin(), q.end()), q.end());
  std::vector<double> score(lengths_.size(), 0.0);
  std::vector<std::int64_t> hit;  // lines with a score, in the order first met
  const auto N = static_cast<double>(documents_);
  for (const std::string& term : q) {
    const auto it = std::lower_bound(terms_.begin(), terms_.end(), term);
    if (it == terms_.end() || *it != term) continue;
    const auto t = static_cast<std::size_t>(it - terms_.begin());
    const auto n = static_cast<double>(starts_[t + 1] - starts_[t]);
    const double idf = std::log(1.0 + (N - n + 0.5) / (n + 0.5));
    for (std::int64_t p = starts_[t]; p < starts_[t + 1]; ++p) {
      const auto d = static_cast<std::size_t>(lines_[static_cast<std::size_t>(p)]);
      const double f = counts_[static_cast<std::size_t>(p)];
      const double norm = kK1 * (1.0 - kB + kB * lengths_[d] / average_length_);
      if (score[d] == 0.0) hit.push_back(static_cast<std::int64_t>(d));
      score[d] += idf * f * (kK1 + 1.0) / (f + norm);
    }
  }
  std::vector<std::pair<double, std::int64_t>> ranked;
  ranked.reserve(hit.size());
  for (const std::int64_t d : hit) ranked.emplace_back(score[static_cast<std::size_t>(d)], d);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  return ranked;
}

std::int64_t Bm25Index::memory_bytes() const {
  std::int64_t bytes = 0;
  const std::size_t inline_capacity = std::string().capacity();  // short terms live inside the string
  for (const std::string& t : terms_)
    bytes += static_cast<std::int64_t>(sizeof(std::string) + (t.capacity() > inline_capacity ? t.capacity() + 1 : 0));
  bytes += static_cast<std::int64_t>(starts_.capacity() * sizeof(std::int64_t) +
                                     (lines_.capacity() + counts_.capacity() + lengths_.capacity()) *
                                         sizeof(std::int32_t));
  return bytes;
}

}  // namespace qkv
