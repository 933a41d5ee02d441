"""qkv.recommender — movie recommendation on ratings, as `qkv train mf`, `qkv train sasrec`
and `qkv recommend` do it, with NumPy arrays in and out.

    import qkv.recommender as rec
    report = rec.train("data/ratings.csv", "mf-model", model="mf")   # or a directory
    m = rec.Recommender("mf-model")
    m.predict([1, 1], [31, 1029])          # -> float32 ratings (matrix factorisation)
    m.recommend(1, top=10)                 # -> [{"movie_id", "title", "year", "genres", "score"}]
    m.similar("Toy Story", top=10)         # the liked movie as the query, the movies as keys
    m.scores(1)                            # -> float32 (movies,), aligned with m.movie_ids

The ratings are a CSV with userId, movieId, rating and timestamp columns (title, year and
genres optional): what `scripts/fetch_data.sh movielens DIR` writes as DIR/ratings.csv.
Every user's ratings are split by time: the last 20% test, 10% of the rest validation
(split_ratings shows it). Bad input raises ValueError (TypeError for wrong types), naming
what was wrong; unknown users, movies and titles too (a title error lists close matches).
"""

import os
import warnings

import numpy as np

from . import _bool, _float, _int, _path, _qkv, _ranged, _text
from .training import _parsed

_I64 = (-(1 << 63), (1 << 63) - 1)  # the ids a ratings file can hold (int64)

__all__ = ["train", "Recommender", "read_ratings", "split_ratings", "mf_cross_validation",
           "SasRecBatches", "sasrec_initial", "evaluate", "save_sasrec_weights"]


def _ratings_csv(data, fn):
    data = _path(data, fn, "data")
    return os.path.join(data, "ratings.csv") if os.path.isdir(data) else data


def _ids(values, fn, name):
    a = np.asarray(values)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise ValueError(f"{fn}: {name} must be 1-D, got shape {a.shape}")
    if a.size and a.dtype.kind == "O" and all(isinstance(x, int) and not isinstance(x, bool)
                                              for x in a.tolist()):
        raise ValueError(f"{fn}: {name} must fit in int64 (the ids of a ratings file), got "
                         f"{max(a.tolist(), key=abs)}")
    if a.size and a.dtype.kind not in "iu":
        raise TypeError(f"{fn}: {name} must hold integers, got dtype {a.dtype}")
    if a.size and a.dtype.kind == "u" and a.max() >= np.uint64(1 << 63):  # astype would wrap it
        raise ValueError(f"{fn}: {name} must fit in int64 (the ids of a ratings file), got "
                         f"{a.max()}")
    return a.astype(np.int64)


def read_ratings(path):
    """The ratings CSV as NumPy arrays: {"user_id", "movie_id", "rating" (float32),
    "timestamp"} in file order, and "movies": {"movie_id", "title", "year" (0 = unknown),
    "genres"} by ascending movieId."""
    return _qkv._read_ratings(_ratings_csv(path, "read_ratings"))


def split_ratings(path):
    """The split every tool uses: {"fit", "validation", "test"}, each {"user_id",
    "movie_id", "rating"}, and "description" (the rule and the counts)."""
    return _qkv._split_ratings(_ratings_csv(path, "split_ratings"))


def train(data, out, model="mf", **options):
    """qkv.train(model, data=data, out=out, **options): a recommender ("mf", matrix
    factorisation, or "sasrec", self-attention over each user's history) trained as `qkv
    train mf` / `qkv train sasrec` trains it, writing the model directory `out`
    (config.json, model.safetensors, users.csv, movies.csv, history.csv). Each model takes
    only its own options, the CLI's (qkv.options("train mf") lists them).

    -> the report: the loop's fields ("task", "steps", "interrupted", "seconds",
    "evaluations", "best_step", "checkpoint", ...), then {"model", "split", "users", "movies",
    "ratings", ("rmse_global_mean", "rmse_biases", "biases_l2", "rmse_mf" for mf: the test RMSEs and
    the biases' λ, chosen on the validation parts), "popularity",
    "trained" (ranking metrics: "hr10", "ndcg10", "hr10_catalogue", "ndcg10_catalogue",
    "hr10_all", "ndcg10_all", "users"), "best_epoch", "validation", "train_seconds",
    "train_steps", "num_parameters", "health" (the weak-model check's numbers) and "warnings"
    (what is weak, each also a UserWarning; [] for a healthy model)}.
    """
    from .training import train as train_task
    if model not in ("mf", "sasrec"):
        raise ValueError(f"recommender.train: model must be 'mf' or 'sasrec', got {model!r}")
    return train_task(model, data=data, out=out, **options)


def mf_cross_validation(data, folds=5, dim=32, epochs=40, batch=256, lr=2e-3, l2=0.05, seed=0):
    """Matrix factorisation under a random `folds`-fold split (the protocol of published
    MovieLens figures): per fold {"global_mean", "biases", "mf"} test RMSE (the biases fitted
    exactly, their λ chosen on the validation ratings, as `train` does)."""
    fn = "mf_cross_validation"
    return _qkv._mf_cross_validation(_ratings_csv(data, fn), _ranged(folds, fn, "folds", 2, 100),
                                     _ranged(dim, fn, "dim", 0, 4096), _ranged(epochs, fn, "epochs", 1, 100_000),
                                     _ranged(batch, fn, "batch", 1, 1 << 20), _float(lr, fn, "lr"),
                                     _float(l2, fn, "l2"), _ranged(seed, fn, "seed", 0, (1 << 64) - 1))


class Recommender:
    """A model directory of `qkv train mf` or `qkv train sasrec` / train(). Users and movies are named by
    their ids (userId, movieId) everywhere; arrays are aligned with movie_ids."""

    def __init__(self, directory):
        directory = _path(directory, "Recommender", "directory")
        self._m = _qkv._Recommender.load(directory)
        self.kind = self._m.kind                 # "mf" | "sasrec"
        # What is weak about the model, if anything (collapsed movie embeddings; below its
        # baseline on validation): each a UserWarning too. health: the measured numbers.
        self.warnings = list(self._m.warnings)
        self.health = self._m.health
        from .models import _caller_level
        for w in self.warnings:
            warnings.warn(f"Recommender({directory!r}): {w}", UserWarning, stacklevel=_caller_level())
        self.user_ids = self._m.user_ids         # int64 (users,)
        self.movie_ids = self._m.movie_ids       # int64 (movies,)
        self.titles = self._m.titles
        self.years = self._m.years               # int64, 0 = unknown
        self.genres = self._m.genres

    def _user(self, user, fn):
        return self._m.user_index(self._id(user, fn, "user"))

    @staticmethod
    def _id(value, fn, name):
        """A userId or movieId: an int (TypeError otherwise) that fits in int64 as the ids
        of a ratings file do (ValueError otherwise, naming it)."""
        value = _int(value, fn, name)
        if not _I64[0] <= value <= _I64[1]:
            raise ValueError(f"{fn}: {name} {value} is not an id of this model (ids are "
                             f"int64, in [-2**63, 2**63 - 1])")
        return value

    def _movie_dict(self, index, **extra):
        i = int(index)
        year = int(self.years[i])
        return {"movie_id": int(self.movie_ids[i]), "title": self.titles[i],
                "year": year if year else None, "genres": self.genres[i], **extra}

    def movie(self, title_or_id):
        """A movie's movieId from a title ("Toy Story" or "Toy Story (1995)") or its id."""
        if isinstance(title_or_id, str):
            return int(self.movie_ids[self._m.find_movie(_text(title_or_id, "movie", "title"))])
        return int(self.movie_ids[self._m.movie_index(self._id(title_or_id, "movie", "movie"))])

    def history(self, user):
        """The movieIds the model knows the user rated, in time order."""
        return self.movie_ids[self._m.history(self._user(user, "history"))]

    def scores(self, user):
        """float32 (movies,): the model's score of every movie for the user (mf: the
        predicted rating, unclipped; sasrec: the next-movie logit)."""
        return self._m.scores(self._user(user, "scores"))

    def recommend(self, user, top=None):
        """The `top` movies (default 10) the user has not rated, best first, as dicts with
        "score". top is `qkv recommend --top` (qkv.options("recommend"))."""
        top = _parsed("recommend", top=top)["top"]
        idx, score = self._m.recommend(self._user(user, "recommend"), top)
        return [self._movie_dict(i, score=float(s)) for i, s in zip(idx, score)]

    def similar(self, like, top=None, temperature=None, min_ratings=None):
        """The movies nearest the liked one (a title or a movieId): its embedding is the
        query, the embeddings of the movies with at least `min_ratings` ratings the keys
        (1 = every movie); "weight" is the softmax of cos / temperature. The options and their
        defaults are `qkv recommend --like`'s (qkv.options("recommend"))."""
        o = _parsed("recommend", top=top, temperature=temperature, min_ratings=min_ratings)
        movie = self._m.movie_index(self.movie(like))
        idx, cos, weight = self._m.similar(movie, o["top"], o["temperature"], o["min_ratings"])
        return [self._movie_dict(i, cosine=float(c), weight=float(w)) for i, c, w in zip(idx, cos, weight)]

    def predict(self, users, movies):
        """Predicted ratings (float32, clipped to [0.5, 5]) for pairs of userIds and
        movieIds (array-likes of the same length). mf only: sasrec ranks and raises
        ValueError."""
        users = _ids(users, "predict", "users")
        movies = _ids(movies, "predict", "movies")
        if users.shape != movies.shape:
            raise ValueError(f"predict: {users.size} users but {movies.size} movies")
        if self.kind != "mf":
            raise ValueError("predict: a sasrec model ranks movies and does not predict ratings; "
                             "train one with model='mf'")
        u = np.array([self._m.user_index(int(x)) for x in users], dtype=np.int64)
        m = np.array([self._m.movie_index(int(x)) for x in movies], dtype=np.int64)
        return self._m.predict(u, m)

    def attention(self, user):
        """sasrec: (movieIds attended over (T,), [per block: (heads, T, T) probabilities]);
        the last row of each is the position that scores the next movie."""
        history, layers = self._m.attention(self._user(user, "attention"))
        return self.movie_ids[history], layers

    @classmethod
    def load(cls, directory):
        """Recommender(directory), as qkv.load_model names it."""
        return cls(directory)

    def __call__(self, user, output_attentions=False):
        """{"scores": float32 (movies,) every movie's score for the user (aligned with
        movie_ids)}, and with output_attentions (sasrec only: matrix factorisation has no
        attention, ValueError) "attentions": a tuple of per-block (1, heads, T, T)
        probabilities over the user's last T history movies (Hugging Face's shapes; the last
        row scores the next movie) and "attended": their movieIds (T,)."""
        fn = "Recommender"
        output_attentions = _bool(output_attentions, fn, "output_attentions")
        out = {"scores": self.scores(user)}
        if output_attentions:
            if self.kind != "sasrec":
                raise ValueError(f"{fn}: output_attentions needs a sasrec model; this one is "
                                 f"{self.kind} (matrix factorisation has no attention)")
            attended, layers = self.attention(user)
            out["attentions"] = tuple(np.asarray(a)[None] for a in layers)
            out["attended"] = attended
        return out

    def evaluate(self, data, validation=False):
        """The ranking metrics of this model on the split of `data` (the ratings it was
        trained on)."""
        return self._m.evaluate(_ratings_csv(data, "evaluate"), bool(validation))


def evaluate(model_dir, data, validation=False):
    """Recommender(model_dir).evaluate(data, validation)."""
    return Recommender(model_dir).evaluate(data, validation)


class SasRecBatches:
    """SASRec's training batches for the ratings `data`, a pure function of (seed, epoch,
    step): get(epoch, step) -> {"users" (B,), "inputs", "positives", "negatives" (B, T)},
    item index + 1 with 0 for padding / no target (right-padded)."""

    def __init__(self, data, batch=128, max_len=200, seed=0):
        fn = "SasRecBatches"
        self._b = _qkv._SasRecBatches(_ratings_csv(data, fn), _ranged(batch, fn, "batch", 1, 1 << 20),
                                      _ranged(max_len, fn, "max_len", 1, 4096),
                                      _ranged(seed, fn, "seed", 0, (1 << 64) - 1))
        self.steps_per_epoch = self._b.steps_per_epoch
        self.num_items = self._b.num_items

    def get(self, epoch, step):
        return self._b.get(_int(epoch, "get", "epoch"), _int(step, "get", "step"))


def sasrec_initial(num_items, dim=50, layers=2, heads=1, max_len=200, seed=0):
    """SASRec's initial weights as qkv draws them: {name: float32 array}."""
    return _qkv._sasrec_initial(num_items, dim, layers, heads, max_len, seed)


def save_sasrec_weights(model_dir, weights):
    """Replaces a sasrec model directory's weights (e.g. with a torch twin's). Every
    tensor is checked first (a wrong name or shape raises ValueError and the directory is
    left as it was); the directory then changes as a whole, config.json last."""
    _qkv._save_sasrec_weights(_path(model_dir, "save_sasrec_weights", "model_dir"),
                              {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()})


def _sasrec_forward(weights, ids, dim=50, layers=2, heads=1, max_len=200):
    return _qkv._sasrec_forward(weights, np.ascontiguousarray(ids, dtype=np.int64), dim, layers, heads, max_len)


def _sasrec_loss(weights, batch, dim=50, layers=2, heads=1, max_len=200, dropout=0.0, seed=0):
    """The loss and its gradients; dropout p > 0 trains' dropout, its masks from seed
    (sasrec_loss's nn::DropoutDraw{dropout, seed})."""
    return _qkv._sasrec_loss(weights, batch, dim, layers, heads, max_len, dropout, seed)
