// Bindings of the recommender task (recommender/recommender.h) and of SASRec (qkv/sasrec.h), behind
// the pure-Python qkv.recommender: training with a progress callback, a loaded model's
// queries, the ratings as NumPy arrays, and for the torch twin and the tests SASRec's
// batches, initial weights, forward and loss with every gradient. Arrays cross as NumPy
// copies (f32 weights, int64 ids and indices).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings_options.h"
#include "bindings_training.h"
#include "qkv/error.h"
#include "recommender/recommender.h"
#include "qkv/safetensors.h"
#include "qkv/sasrec.h"

namespace py = pybind11;
namespace models = qkv::models;
namespace rec = qkv::recommender;

namespace {

using qkv_python::F32Array;
using qkv_python::IdArray;
using qkv_python::to_numpy;

template <class T>
py::array_t<T> vector_to_numpy(const std::vector<T>& v, std::vector<py::ssize_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<py::ssize_t>(v.size())};
  py::array_t<T> a(shape);
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

models::SasRecConfig sasrec_config(std::int64_t num_items, std::int64_t dim, std::int64_t layers,
                                   std::int64_t heads, std::int64_t max_len) {
  models::SasRecConfig c;
  c.num_items = num_items;
  c.dim = dim;
  c.layers = layers;
  c.heads = heads;
  c.max_len = max_len;
  return c;
}

// name -> array into a model of config c (names and shapes checked by load_state_dict).
models::SasRecWeights sasrec_weights(const py::dict& weights, const models::SasRecConfig& c) {
  models::SasRecWeights w = models::SasRecWeights::zeros_like(c);
  qkv::nn::load_state_dict(w.parameters(), qkv_python::state_dict_from(weights));
  return w;
}

std::int64_t num_items_of(const py::dict& weights) {
  QKV_CHECK(weights.contains("item_emb.weight"), "sasrec: the weights have no 'item_emb.weight'");
  F32Array a = weights["item_emb.weight"].cast<F32Array>();
  QKV_CHECK(a.ndim() == 2 && a.shape(0) >= 2, "sasrec: item_emb.weight must be (num_items + 1, dim)");
  return a.shape(0) - 1;
}

py::dict weights_dict(models::SasRecWeights& w) {
  py::dict out;
  for (auto& [name, t] : w.parameters()) out[py::str(name)] = to_numpy(*t);
  return out;
}

py::dict metrics_dict(const rec::RankingMetrics& m) {
  py::dict d;
  d["hr10"] = m.hr10;
  d["ndcg10"] = m.ndcg10;
  d["hr10_catalogue"] = m.hr10_catalogue;
  d["ndcg10_catalogue"] = m.ndcg10_catalogue;
  d["hr10_all"] = m.hr10_all;
  d["ndcg10_all"] = m.ndcg10_all;
  d["users"] = m.users;
  return d;
}

py::dict batch_dict(const models::SasRecBatch& b) {
  py::dict d;
  d["users"] = vector_to_numpy(b.users);
  d["inputs"] = vector_to_numpy(b.inputs, {b.B, b.T});
  d["positives"] = vector_to_numpy(b.positives, {b.B, b.T});
  d["negatives"] = vector_to_numpy(b.negatives, {b.B, b.T});
  return d;
}

class Batches {
 public:
  Batches(const std::string& csv, std::int64_t batch, std::int64_t max_len, std::uint64_t seed)
      : data_(rec::read_ratings(csv)),
        split_(rec::temporal_split(data_)),
        batches_(split_, static_cast<std::int64_t>(data_.movies.size()), batch, max_len, seed) {}
  std::int64_t steps_per_epoch() const { return batches_.steps_per_epoch(); }
  std::int64_t num_items() const { return static_cast<std::int64_t>(data_.movies.size()); }
  py::dict get(std::int64_t epoch, std::int64_t step) const { return batch_dict(batches_.get(epoch, step)); }

 private:
  rec::Ratings data_;
  rec::Split split_;
  rec::SasRecBatches batches_;
};

}  // namespace

void register_recommender(py::module_& m) {
  qkv_python::def_options(m, rec::recommend_options());  // Recommender.recommend, similar
  m.def(
      "_read_ratings",
      [](const std::string& path) {
        rec::Ratings data;
        {
          py::gil_scoped_release release;
          data = rec::read_ratings(path);
        }
        std::vector<std::int64_t> users, movies, timestamps, movie_ids, years;
        std::vector<float> ratings;
        py::list titles, genres;
        for (const rec::Rating& r : data.ratings) {
          users.push_back(data.user_ids[static_cast<std::size_t>(r.user)]);
          movies.push_back(data.movies[static_cast<std::size_t>(r.movie)].id);
          ratings.push_back(r.rating);
          timestamps.push_back(r.timestamp);
        }
        for (const rec::Movie& mv : data.movies) {
          movie_ids.push_back(mv.id);
          years.push_back(mv.year);
          titles.append(mv.title);
          genres.append(mv.genres);
        }
        py::dict d;
        d["user_id"] = vector_to_numpy(users);
        d["movie_id"] = vector_to_numpy(movies);
        d["rating"] = vector_to_numpy(ratings);
        d["timestamp"] = vector_to_numpy(timestamps);
        d["movies"] = py::dict(py::arg("movie_id") = vector_to_numpy(movie_ids), py::arg("title") = titles,
                               py::arg("year") = vector_to_numpy(years), py::arg("genres") = genres);
        return d;
      },
      py::arg("path"));

  m.def(
      "_split_ratings",
      [](const std::string& path) {
        rec::Ratings data;
        rec::Split split;
        {
          py::gil_scoped_release release;
          data = rec::read_ratings(path);
          split = rec::temporal_split(data);
        }
        py::dict d;
        const char* names[3] = {"fit", "validation", "test"};
        for (int part = 0; part < 3; ++part) {
          std::vector<std::int64_t> users, movies;
          std::vector<float> ratings;
          for (const rec::Rating& r : split.part(part)) {
            users.push_back(data.user_ids[static_cast<std::size_t>(r.user)]);
            movies.push_back(data.movies[static_cast<std::size_t>(r.movie)].id);
            ratings.push_back(r.rating);
          }
          d[names[part]] = py::dict(py::arg("user_id") = vector_to_numpy(users),
                                    py::arg("movie_id") = vector_to_numpy(movies),
                                    py::arg("rating") = vector_to_numpy(ratings));
        }
        d["description"] = rec::split_description(split);
        return d;
      },
      py::arg("path"));

  // qkv.train("mf") and qkv.train("sasrec"), from the tasks' one option declaration.
  for (const auto* set : {&rec::mf_training_options(), &rec::sasrec_training_options()})
    qkv_python::def_training(m, *set,
                             [](const rec::RecommenderOptions& o, const auto& on_progress, const auto* stop) {
                               return rec::train_recommender(o, on_progress, stop).to_json();
                             });

  m.def(
      "_mf_cross_validation",
      [](const std::string& path, std::int64_t folds, std::int64_t dim, std::int64_t epochs, std::int64_t batch,
         double lr, double l2, std::uint64_t seed) {
        std::vector<rec::FoldRmse> r;
        {
          py::gil_scoped_release release;
          rec::MfOptions o;
          o.solver = "adamw";  // the published random-fold figures it is compared with are SGD fits
          o.dim = dim;
          o.epochs = epochs;
          o.batch = batch;
          o.lr = lr;
          o.l2 = l2;
          o.seed = seed;
          r = rec::mf_cross_validation(rec::read_ratings(path), folds, o, seed);
        }
        py::list out;
        for (const auto& f : r)
          out.append(py::dict(py::arg("global_mean") = f.global_mean, py::arg("biases") = f.biases,
                              py::arg("mf") = f.mf));
        return out;
      },
      py::arg("path"), py::arg("folds"), py::arg("dim"), py::arg("epochs"), py::arg("batch"), py::arg("lr"),
      py::arg("l2"), py::arg("seed"));

  py::class_<rec::Recommender>(m, "_Recommender")
      .def_static("load", [](const std::string& dir) {
        py::gil_scoped_release release;
        return rec::Recommender::load(dir);
      })
      .def_property_readonly("kind", &rec::Recommender::kind)
      // What is weak about the model (recommender/model_health.h): Recommender warns of each.
      .def_property_readonly("warnings", [](const rec::Recommender& r) { return r.health().warnings(); })
      .def_property_readonly("health",
                             [](const rec::Recommender& r) {
                               return py::module_::import("json").attr("loads")(r.health().to_json());
                             })
      .def_property_readonly("user_ids", [](const rec::Recommender& r) { return vector_to_numpy(r.user_ids()); })
      .def_property_readonly("movie_ids",
                             [](const rec::Recommender& r) {
                               std::vector<std::int64_t> ids;
                               for (const auto& mv : r.movies()) ids.push_back(mv.id);
                               return vector_to_numpy(ids);
                             })
      .def_property_readonly("titles",
                             [](const rec::Recommender& r) {
                               std::vector<std::string> t;
                               for (const auto& mv : r.movies()) t.push_back(mv.title);
                               return t;
                             })
      .def_property_readonly("years",
                             [](const rec::Recommender& r) {
                               std::vector<std::int64_t> t;
                               for (const auto& mv : r.movies()) t.push_back(mv.year);
                               return vector_to_numpy(t);
                             })
      .def_property_readonly("genres",
                             [](const rec::Recommender& r) {
                               std::vector<std::string> t;
                               for (const auto& mv : r.movies()) t.push_back(mv.genres);
                               return t;
                             })
      .def("label", [](const rec::Recommender& r, std::int64_t i) {
        QKV_CHECK(i >= 0 && i < static_cast<std::int64_t>(r.movies().size()), "movie index out of range");
        return rec::movie_label(r.movies()[static_cast<std::size_t>(i)]);
      })
      .def("user_index", &rec::Recommender::user_index)
      .def("movie_index", &rec::Recommender::movie_index)
      .def("find_movie", &rec::Recommender::find_movie)
      .def("history", [](const rec::Recommender& r, std::int64_t u) {
        QKV_CHECK(u >= 0 && u < static_cast<std::int64_t>(r.user_ids().size()), "user index out of range");
        return vector_to_numpy(r.history(u));
      })
      .def("scores", [](const rec::Recommender& r, std::int64_t u) {
        std::vector<float> s;
        {
          py::gil_scoped_release release;
          s = r.scores(u);
        }
        return vector_to_numpy(s);
      })
      .def("recommend", [](const rec::Recommender& r, std::int64_t u, std::int64_t k) {
        std::vector<rec::Recommendation> list;
        {
          py::gil_scoped_release release;
          list = r.recommend(u, k);
        }
        std::vector<std::int64_t> idx;
        std::vector<float> score;
        for (const auto& x : list) {
          idx.push_back(x.movie);
          score.push_back(x.score);
        }
        return py::make_tuple(vector_to_numpy(idx), vector_to_numpy(score));
      })
      .def("similar", [](const rec::Recommender& r, std::int64_t movie, std::int64_t k, double temperature,
                         std::int64_t min_ratings) {
        std::vector<rec::Recommendation> list;
        {
          py::gil_scoped_release release;
          list = r.similar(movie, k, temperature, min_ratings);
        }
        std::vector<std::int64_t> idx;
        std::vector<float> cosine, weight;
        for (const auto& x : list) {
          idx.push_back(x.movie);
          cosine.push_back(x.score);
          weight.push_back(x.weight);
        }
        return py::make_tuple(vector_to_numpy(idx), vector_to_numpy(cosine), vector_to_numpy(weight));
      })
      .def("predict", [](const rec::Recommender& r, const IdArray& users, const IdArray& movies) {
        QKV_CHECK(users.ndim() == 1 && movies.ndim() == 1, "predict: users and movies must be 1-D");
        std::vector<float> out;
        {
          py::gil_scoped_release release;
          out = r.predict(std::span<const std::int64_t>(users.data(), static_cast<std::size_t>(users.size())),
                          std::span<const std::int64_t>(movies.data(), static_cast<std::size_t>(movies.size())));
        }
        return vector_to_numpy(out);
      })
      .def("attention", [](const rec::Recommender& r, std::int64_t u) {
        rec::HistoryAttention a;
        {
          py::gil_scoped_release release;
          a = r.attention(u);
        }
        py::list layers;
        for (const auto& t : a.layers) layers.append(to_numpy(t));
        return py::make_tuple(vector_to_numpy(a.history), layers);
      })
      .def("evaluate", [](const rec::Recommender& r, const std::string& csv, bool validation) {
        rec::RankingMetrics mt;
        {
          py::gil_scoped_release release;
          mt = r.evaluate(rec::read_ratings(csv), validation);
        }
        return metrics_dict(mt);
      });

  py::class_<Batches>(m, "_SasRecBatches")
      .def(py::init<const std::string&, std::int64_t, std::int64_t, std::uint64_t>(), py::arg("data"),
           py::arg("batch"), py::arg("max_len"), py::arg("seed"))
      .def_property_readonly("steps_per_epoch", &Batches::steps_per_epoch)
      .def_property_readonly("num_items", &Batches::num_items)
      .def("get", &Batches::get, py::arg("epoch"), py::arg("step"));

  m.def(
      "_sasrec_initial",
      [](std::int64_t num_items, std::int64_t dim, std::int64_t layers, std::int64_t heads, std::int64_t max_len,
         std::uint64_t seed) {
        models::SasRecWeights w =
            models::SasRecWeights::initialized(sasrec_config(num_items, dim, layers, heads, max_len), seed);
        return weights_dict(w);
      },
      py::arg("num_items"), py::arg("dim"), py::arg("layers"), py::arg("heads"), py::arg("max_len"),
      py::arg("seed"));

  m.def(
      "_sasrec_forward",
      [](const py::dict& weights, const IdArray& ids, std::int64_t dim, std::int64_t layers, std::int64_t heads,
         std::int64_t max_len) {
        const models::SasRecConfig c = sasrec_config(num_items_of(weights), dim, layers, heads, max_len);
        const models::SasRecWeights w = sasrec_weights(weights, c);
        QKV_CHECK(ids.ndim() == 2, "sasrec forward: ids must be (B, T)");
        const std::vector<std::int64_t> v(ids.data(), ids.data() + ids.size());
        return to_numpy(w.forward(v, ids.shape(0), ids.shape(1)));
      },
      py::arg("weights"), py::arg("ids"), py::arg("dim"), py::arg("layers"), py::arg("heads"),
      py::arg("max_len"));

  m.def(
      "_sasrec_loss",
      [](const py::dict& weights, const py::dict& batch, std::int64_t dim, std::int64_t layers, std::int64_t heads,
         std::int64_t max_len, double dropout, std::uint64_t seed) {
        const models::SasRecConfig c = sasrec_config(num_items_of(weights), dim, layers, heads, max_len);
        const models::SasRecWeights w = sasrec_weights(weights, c);
        models::SasRecBatch b;
        const IdArray inputs = batch["inputs"].cast<IdArray>();
        QKV_CHECK(inputs.ndim() == 2, "sasrec loss: inputs must be (B, T)");
        b.B = inputs.shape(0);
        b.T = inputs.shape(1);
        b.inputs.assign(inputs.data(), inputs.data() + inputs.size());
        const IdArray pos = batch["positives"].cast<IdArray>(), neg = batch["negatives"].cast<IdArray>();
        b.positives.assign(pos.data(), pos.data() + pos.size());
        b.negatives.assign(neg.data(), neg.data() + neg.size());
        models::SasRecWeights grads = models::SasRecWeights::zeros_like(c);
        const double loss = models::sasrec_loss(c, w, b, &grads, qkv::nn::DropoutDraw{dropout, seed});
        return py::make_tuple(loss, weights_dict(grads));
      },
      py::arg("weights"), py::arg("batch"), py::arg("dim"), py::arg("layers"), py::arg("heads"),
      py::arg("max_len"), py::arg("dropout") = 0.0, py::arg("seed") = 0);

  // A model directory's weights replaced by `weights` (a torch twin's), checked by loading.
  m.def(
      "_save_sasrec_weights",
      [](const std::string& dir, const py::dict& weights) {
        rec::replace_sasrec_weights(dir, qkv_python::state_dict_from(weights));
      },
      py::arg("dir"), py::arg("weights"));
}
