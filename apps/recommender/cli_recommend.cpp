// qkv recommend — what a model of `qkv train mf` or `qkv train sasrec` says:
//   --user ID     the top movies the user has not rated (history.csv holds what they rated)
//   --like TITLE  the movies nearest a liked one: its embedding the query, every movie's a
//                 key, ranked by the softmax weight of the scaled cosine similarity
//   --predict F   predicted ratings for userId,movieId lines (matrix factorisation only)
//   --show/--html with --user and a SASRec model: the attention of the position that scores
//                 the next movie over the user's history, per block and head
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "recommender/csv.h"
#include "io/text_input.h"
#include "print.h"
#include "qkv/qkv.h"
#include "recommender/recommender.h"

namespace qkv::cli {
namespace {

using recommender::Movie;
using recommender::Recommendation;
using recommender::Recommender;

nlohmann::ordered_json movie_json(const Movie& m) {
  nlohmann::ordered_json j;
  j["movieId"] = m.id;
  j["title"] = m.title;
  if (m.year > 0) j["year"] = m.year; else j["year"] = nullptr;
  j["genres"] = m.genres;
  return j;
}

// A movie as the terminal shows it: titles and genres come from the ratings file, so a
// control character in one is written \xNN, never sent to the terminal (JSON and the HTML
// page escape them their own way).
std::string movie_shown(const Movie& m) { return printable(recommender::movie_label(m), 300); }

void print_list(std::ostream& out, const Recommender& r, const std::vector<Recommendation>& list,
                bool weights) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Movie& m = r.movies()[static_cast<std::size_t>(list[i].movie)];
    out << format("%3zu. ", i + 1) << (weights ? format("cos %6.3f  weight %.4f  ", list[i].score, list[i].weight)
                                               : format("%7.3f  ", list[i].score))
        << movie_shown(m) << (m.genres.empty() ? "" : "  [" + printable(m.genres, 300) + "]") << '\n';
  }
}

int run_predict(const RecommendOptions& o, const Recommender& r, std::ostream& out) {
  if (r.kind() != "mf")
    throw Error("--predict: a " + r.kind() + " model ranks movies and does not predict ratings; "
                "train one with qkv train mf");
  const std::vector<io::CsvRecord> rows =
      io::parse_csv(io::read_text(o.predict, "--predict"), "--predict " + o.predict);
  std::vector<std::int64_t> users, movies, user_ids, movie_ids;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const io::CsvRecord& row = rows[i];
    const std::string where = "--predict " + o.predict + " line " + std::to_string(row.line);
    if (i == 0 && row.fields == std::vector<std::string>{"userId", "movieId"}) continue;
    if (row.fields.size() != 2)
      throw Error(where + ": expected userId,movieId, got " + std::to_string(row.fields.size()) + " fields");
    const std::int64_t ids[2] = {io::csv_integer(row.fields[0], where, "userId"),
                                 io::csv_integer(row.fields[1], where, "movieId")};
    try {
      users.push_back(r.user_index(ids[0]));
      movies.push_back(r.movie_index(ids[1]));
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    user_ids.push_back(ids[0]);
    movie_ids.push_back(ids[1]);
  }
  if (users.empty()) throw Error("--predict: " + o.predict + " holds no userId,movieId line");
  const std::vector<float> ratings = r.predict(users, movies);
  if (o.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < ratings.size(); ++i)
      j.push_back({{"userId", user_ids[i]}, {"movieId", movie_ids[i]}, {"rating", ratings[i]}});
    out << nlohmann::ordered_json{{"predictions", j}, {"warnings", r.health().warnings()}}.dump() << '\n';
    return 0;
  }
  out << "userId,movieId,rating\n";
  for (std::size_t i = 0; i < ratings.size(); ++i)
    out << user_ids[i] << ',' << movie_ids[i] << ',' << format("%.4f", ratings[i]) << '\n';
  return 0;
}

void show_attention(std::ostream& out, const Recommender& r, const recommender::HistoryAttention& a,
                    std::int64_t top) {
  const auto T = static_cast<std::int64_t>(a.history.size());
  out << "\nthe position that scores the next movie attends over the last " << T
      << " movies of the history (most recent last):\n";
  for (std::size_t layer = 0; layer < a.layers.size(); ++layer) {
    const Tensor& p = a.layers[layer];  // (H, T, T)
    for (std::int64_t h = 0; h < p.size(0); ++h) {
      const float* row = p.data_as<float>() + (h * T + (T - 1)) * T;  // the last query
      std::vector<std::int64_t> order(static_cast<std::size_t>(T));
      for (std::int64_t t = 0; t < T; ++t) order[static_cast<std::size_t>(t)] = t;
      const std::size_t shown = std::min<std::size_t>(order.size(), static_cast<std::size_t>(top));
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shown), order.end(),
                        [&](std::int64_t x, std::int64_t y) { return row[x] > row[y]; });
      const float most = row[order[0]];
      out << format("layer %zu, head %lld: the %zu movies with the most weight\n", layer,
                    static_cast<long long>(h), shown);
      for (std::size_t i = 0; i < shown; ++i) {
        const std::int64_t t = order[i];
        std::string bar;
        const int n = most > 0 ? static_cast<int>(20.0 * row[t] / most + 0.5) : 0;
        for (int c = 0; c < 20; ++c) bar += c < n ? "█" : "·";
        out << format("  %6.4f %s  #%-4lld ", row[t], bar.c_str(), static_cast<long long>(t + 1))
            << movie_shown(r.movies()[static_cast<std::size_t>(a.history[static_cast<std::size_t>(t)])]) << '\n';
      }
    }
  }
}

}  // namespace

int run_recommend(const RecommendOptions& o, const recommender::RecommendQueryOptions& q, std::ostream& out) {
  const int modes = (o.has_user ? 1 : 0) + (o.has_like ? 1 : 0) + (o.has_predict ? 1 : 0);
  if (modes != 1)
    throw UsageError("--user", "give exactly one of --user ID, --like TITLE or --predict FILE");
  if ((o.show || !o.html.empty()) && !o.has_user)
    throw UsageError(o.show ? "--show" : "--html", "shows the attention behind a user's "
                                                   "recommendation: it needs --user");
  if (!o.html.empty()) {
    Inputs inputs;
    add_directory_inputs(inputs, "--model", o.model);
    if (o.has_predict) add_input(inputs, "--predict", o.predict);
    check_output_path("--html", o.html, inputs);
  }
  const Recommender r = Recommender::load(o.model);
  if ((o.show || !o.html.empty()) && r.kind() != "sasrec")
    throw UsageError(o.show ? "--show" : "--html",
                     "needs a sasrec model: " + o.model + " is matrix factorisation, which has no attention");
  // A weak model (recommender/model_health.h) still answers, after a warning saying what is
  // weak and what to do; --json carries the warnings as "warnings". Only once the command
  // is known to run: a usage error stays the one line it is.
  const std::vector<std::string> warnings = r.health().warnings();
  for (const std::string& w : warnings) warn(quote_path(o.model) + ": " + w);
  if (o.has_predict) return run_predict(o, r, out);

  if (o.has_like) {
    const std::int64_t movie = r.find_movie(o.like);
    const std::vector<Recommendation> list = r.similar(movie, q.top, q.temperature, q.min_ratings);
    const Movie& liked = r.movies()[static_cast<std::size_t>(movie)];
    if (o.json) {
      nlohmann::ordered_json j;
      j["like"] = movie_json(liked);
      j["model"] = r.kind();
      j["min_ratings"] = q.min_ratings;
      j["similar"] = nlohmann::ordered_json::array();
      for (const Recommendation& x : list) {
        nlohmann::ordered_json m = movie_json(r.movies()[static_cast<std::size_t>(x.movie)]);
        m["cosine"] = x.score;
        m["weight"] = x.weight;
        j["similar"].push_back(m);
      }
      j["warnings"] = warnings;
      out << j.dump() << '\n';
      return 0;
    }
    out << "movies like " << movie_shown(liked) << " (" << r.kind()
        << " embeddings; query = the liked movie, keys = every movie rated " << q.min_ratings
        << "+ times, weight = softmax(cos / " << format("%g", q.temperature) << ")):\n";
    print_list(out, r, list, true);
    return 0;
  }

  const std::int64_t user = r.user_index(o.user);
  const std::vector<Recommendation> list = r.recommend(user, q.top);
  std::optional<recommender::HistoryAttention> attention;
  if (o.show || !o.html.empty()) attention = r.attention(user);
  if (!o.html.empty()) {
    viz::AttentionGroup group = recommender::history_attention_group(r, o.user, *attention);
    viz::AttentionView view;
    view.title = viz::page_title("SASRec recommender", o.model);
    view.subtitle = "user " + std::to_string(o.user) + ": the last row scores the next movie" +
                    (list.empty() ? std::string("; every movie is rated already")
                                  : "; top pick: " + recommender::movie_label(r.movies()[static_cast<std::size_t>(list.front().movie)]));
    view.groups.push_back(std::move(group));
    viz::write_file(o.html, viz::render_html(view));
  }
  if (o.json) {
    nlohmann::ordered_json j;
    j["user"] = o.user;
    j["model"] = r.kind();
    j["history"] = r.history(user).size();
    j["recommendations"] = nlohmann::ordered_json::array();
    for (const Recommendation& x : list) {
      nlohmann::ordered_json m = movie_json(r.movies()[static_cast<std::size_t>(x.movie)]);
      m["score"] = x.score;
      j["recommendations"].push_back(m);
    }
    if (attention) {
      j["attention"] = nlohmann::ordered_json::array();  // per block: (heads, T) of the last query
      const auto T = static_cast<std::int64_t>(attention->history.size());
      for (const Tensor& p : attention->layers) {
        nlohmann::ordered_json heads = nlohmann::ordered_json::array();
        for (std::int64_t h = 0; h < p.size(0); ++h) {
          const float* row = p.data_as<float>() + (h * T + (T - 1)) * T;
          heads.push_back(std::vector<float>(row, row + T));
        }
        j["attention"].push_back(heads);
      }
      j["attended"] = nlohmann::ordered_json::array();
      for (const std::int64_t m : attention->history) j["attended"].push_back(r.movies()[static_cast<std::size_t>(m)].id);
    }
    j["warnings"] = warnings;
    out << j.dump() << '\n';
    if (!o.html.empty()) std::cerr << "wrote " << printable(o.html) << '\n';
    return 0;
  }
  if (list.empty())
    out << "user " << o.user << " has rated every one of the " << r.movies().size()
        << " movies: nothing is left to recommend\n";
  else
    out << "top " << list.size() << " for user " << o.user << " (" << r.kind() << "; "
      << r.history(user).size() << " rated movies excluded; "
      << (r.kind() == "mf" ? "score = predicted rating" : "score = h·e, the next-movie logit") << "):\n";
  print_list(out, r, list, false);
  if (o.show) show_attention(out, r, *attention, std::min<std::int64_t>(q.top, 10));
  if (!o.html.empty()) out << "wrote " << printable(o.html) << '\n';
  return 0;
}

}  // namespace qkv::cli
