"""qkv.recommender from Python: train, predict, recommend, similar and attention with NumPy
arrays in and out, each against what the model directory holds (its CSVs and tensors), and
bad input as ValueError / TypeError naming what was wrong."""
import csv
import os
import sys

import numpy as np
import pytest
import torch

import qkv
from oracle import recorded_attention

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from bench.gpt2_torch import read_safetensors  # noqa: E402
from bench.sasrec_torch import make_sasrec_class  # noqa: E402

rec = qkv.recommender


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """30 users of 25 movies with planted rank-2 tastes; movie 3 and 4 share a title."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((30, 2)), rng.standard_normal((25, 2))
    d = tmp_path_factory.mktemp("movielens")
    with open(d / "ratings.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["movieId", "title", "year", "genres", "userId", "rating", "timestamp"])
        t = 10_000
        for u in range(30):
            for m in rng.choice(25, size=15, replace=False):
                t += 1
                r = float(np.clip(np.round(2 * (3 + 1.5 * a[u] @ b[m])) / 2, 0.5, 5))
                title = "Twin" if m in (3, 4) else f"Film {m}, The"
                w.writerow([m + 1, title, 1990 + m, "Drama", u + 1, r, t])
    return d


@pytest.fixture(scope="module")
def mf(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("mf") / "model"
    seen = []
    report = rec.train(str(data), out, model="mf", epochs=4, dim=4, progress=seen.append)
    assert [p["epoch"] for p in seen if p["epoch_end"]] == [1, 2, 3, 4]
    assert {p["task"] for p in seen} == {"mf"} and all(p["metric"] == "validation RMSE" for p in seen if p["epoch_end"])
    assert report["model"] == "mf" and report["users"] == 30 and report["movies"] == 25
    for key in ("rmse_global_mean", "rmse_biases", "rmse_mf"):
        assert 0 < report[key] < 5
    assert report["biases_l2"] in (0, 0.3, 1, 2, 3, 5, 10, 20, 50, 100)
    return rec.Recommender(out)


def history_of(model_dir, user):
    with open(os.path.join(model_dir, "history.csv"), newline="") as f:
        return [int(r["movieId"]) for r in csv.DictReader(f) if int(r["userId"]) == user]


def test_predict_recommend_and_scores_agree(mf, tmp_path):
    assert mf.kind == "mf"
    np.testing.assert_array_equal(mf.user_ids, np.arange(1, 31))
    np.testing.assert_array_equal(mf.movie_ids, np.arange(1, 26))
    scores = mf.scores(7)
    assert scores.dtype == np.float32 and scores.shape == (25,)
    # predict: the clipped score, NumPy arrays in any integer dtype, in input order
    got = mf.predict(np.array([7, 7, 7], dtype=np.int32), [1, 25, 1])
    np.testing.assert_allclose(got, np.clip(scores[[0, 24, 0]], 0.5, 5), rtol=0, atol=0)
    top = mf.recommend(7, top=4)
    assert len(top) == 4
    assert [m["score"] for m in top] == sorted((m["score"] for m in top), reverse=True)
    history = set(mf.history(7).tolist())
    assert not history & {m["movie_id"] for m in top}
    unseen = [i for i in range(25) if i + 1 not in history]
    assert top[0]["score"] == pytest.approx(float(scores[unseen].max()), abs=0)


def test_similar_is_a_softmax_over_cosines(mf):
    near = mf.similar("Film 0, The (1990)", top=24, min_ratings=1)
    assert len(near) == 24 and 1 not in [m["movie_id"] for m in near]
    weights = np.array([m["weight"] for m in near])
    cosines = np.array([m["cosine"] for m in near])
    assert np.all(np.diff(weights) <= 0) and np.all(np.diff(cosines) <= 1e-6)
    # weight_i / weight_j = exp((cos_i - cos_j) / temperature)
    np.testing.assert_allclose(weights[1:] / weights[0], np.exp((cosines[1:] - cosines[0]) / 0.1), rtol=1e-4)
    assert mf.movie("Twin (1994)") == 5 and mf.movie(4) == 4


def test_errors_name_what_was_wrong(mf, data, tmp_path):
    with pytest.raises(ValueError, match="unknown user 99"):
        mf.recommend(99)
    with pytest.raises(ValueError, match="ambiguous: 2 movies"):
        mf.similar("Twin")
    with pytest.raises(ValueError, match="close matches"):
        mf.similar("Flim 3")
    with pytest.raises(ValueError, match="unknown movie 77"):
        mf.predict([1], [77])
    with pytest.raises(ValueError, match="2 users but 1 movies"):
        mf.predict([1, 2], [3])
    with pytest.raises(TypeError, match="must hold integers"):
        mf.predict([1.5], [3])
    with pytest.raises(TypeError, match="user must be an int"):
        mf.recommend("7")
    with pytest.raises(ValueError, match="needs a sasrec model"):
        mf.attention(1)
    with pytest.raises(ValueError, match="model must be 'mf' or 'sasrec'"):
        rec.train(str(data), tmp_path / "x", model="svd")
    with pytest.raises(ValueError, match="train sasrec: heads: 3 must divide --dim 50"):
        rec.train(str(data), tmp_path / "x", model="sasrec", heads=3)
    bad = tmp_path / "bad.csv"
    bad.write_text("userId,movieId,rating,timestamp\n1,2,3,4\n1,3,9,5\n")
    with pytest.raises(ValueError, match="line 3: rating 9 is outside"):
        rec.train(str(bad), tmp_path / "y")
    with pytest.raises(ValueError, match="config.json"):
        rec.Recommender(tmp_path)


def test_sasrec_attention_and_no_predictions(data, tmp_path):
    out = tmp_path / "sasrec"
    report = rec.train(str(data), out, model="sasrec", epochs=2, dim=8, heads=2, max_len=6, eval_every=1)
    assert 0 <= report["trained"]["hr10"] <= 1 and report["best_epoch"] in (1, 2)
    m = rec.Recommender(out)
    attended, layers = m.attention(3)
    np.testing.assert_array_equal(attended, history_of(str(out), 3)[-6:])
    assert len(layers) == 2 and layers[0].shape == (2, 6, 6)
    np.testing.assert_allclose(layers[1].sum(axis=-1), 1, rtol=1e-5)
    assert np.all(np.triu(layers[0][0], 1) == 0)  # causal
    # Through the model registry, with Hugging Face's shapes: per block (1, heads, T, T).
    loaded = qkv.load_model(out)
    assert type(loaded) is rec.Recommender and loaded.kind == "sasrec"
    o = loaded(3, output_attentions=True)
    np.testing.assert_array_equal(o["attended"], attended)
    assert len(o["attentions"]) == 2
    for got, want in zip(o["attentions"], layers):
        assert got.shape == (1, 2, 6, 6)
        np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(o["scores"], m.scores(3))
    assert "attentions" not in loaded(3)
    # Against scripts/bench/sasrec_torch.py's float64 twin on the saved weights: the user's
    # last 6 movies (item index + 1, no padding), each block's per-head probabilities. The
    # blocks are products of length d = 8 from embeddings of order 1, each rounding within
    # 8u relative; a probability moves by at most twice its score's error, and through the
    # 2 blocks 2 · 8 · 8 · 2^-24 · max|score| (< 100 here) stays below 1e-4.
    history, _ = m._m.attention(m._user(3, "attention"))  # item indices (T,)
    twin = make_sasrec_class()(read_safetensors(os.path.join(out, "model.safetensors")), heads=2,
                               dtype=torch.float64)
    store = []
    for block in twin.blocks:
        recorded_attention(block.self_attn, store)
    twin(torch.from_numpy(np.asarray(history, dtype=np.int64)[None] + 1))
    for got, want in zip(o["attentions"], store):
        np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="does not predict ratings"):
        m.predict([3], [1])
    # the evaluation of the saved directory reproduces the report
    assert m.evaluate(str(data))["hr10"] == pytest.approx(report["trained"]["hr10"], abs=0)


def test_mf_has_no_attentions(mf):
    assert "scores" in mf(3)
    with pytest.raises(ValueError, match="matrix factorisation has no attention"):
        mf(3, output_attentions=True)


def test_save_sasrec_weights_replaces_the_directory_whole(data, tmp_path):
    """New weights (a torch twin's, say) replace the old ones, config.json's record of the
    files follows (the directory loads again), and wrong weights leave it as it was."""
    out = tmp_path / "sasrec"
    rec.train(str(data), out, model="sasrec", epochs=1, dim=8, heads=2, max_len=6)
    weights = read_safetensors(os.path.join(out, "model.safetensors"))
    before = rec.Recommender(out).scores(3)
    doubled = {name: 2 * np.asarray(t, dtype=np.float32) for name, t in weights.items()}
    rec.save_sasrec_weights(out, doubled)
    after = rec.Recommender(out)  # config.json's "files" records the new model.safetensors
    np.testing.assert_array_equal(read_safetensors(os.path.join(out, "model.safetensors"))["item_emb.weight"],
                                  doubled["item_emb.weight"])
    assert not np.array_equal(after.scores(3), before)
    saved = {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))}
    wrong = dict(doubled)
    wrong["item_emb.weight"] = wrong["item_emb.weight"][:-1]
    with pytest.raises(ValueError, match="item_emb.weight"):
        rec.save_sasrec_weights(out, wrong)
    missing = {k: v for k, v in doubled.items() if k != "item_emb.weight"}
    with pytest.raises(ValueError, match="item_emb.weight"):
        rec.save_sasrec_weights(out, missing)
    assert {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))} == saved
