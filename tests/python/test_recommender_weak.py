"""The weak-model warnings from Python (apps/recommender/model_health.h), on the real
MovieLens models of the recommender_recipes fixture (tests/cli/train_recipe_models.sh):
qkv.recommender.Recommender gives a UserWarning for SASRec after 30 epochs (its movie
embeddings have collapsed) and none for the shipped recipe's model; `health` holds the
numbers, the cosine equal to a numpy twin over the saved embeddings.

ctest runs this as python.recommender_weak: QKV_TEST_RECIPES_DIR is the fixture's directory.
"""
import json
import os
import struct
import warnings

import numpy as np
import pytest

import qkv.recommender as rec

_DIR = os.environ.get("QKV_TEST_RECIPES_DIR", "")


def _item_embeddings(directory):
    """(I, d) float64: item_emb.weight of model.safetensors without its padding row."""
    with open(os.path.join(directory, "model.safetensors"), "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    t = json.loads(data[8:8 + n])["item_emb.weight"]
    begin, end = t["data_offsets"]
    assert t["dtype"] == "F32"
    e = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=np.float32).reshape(t["shape"])
    return e[1:].astype(np.float64)


def _twin_mean_cosine(m, directory):
    """The mean cosine over every pair of the 200 movies rated most in history.csv (ties
    by index, rated 10+ times), by numpy's pairwise product."""
    import csv
    index = {int(movie): i for i, movie in enumerate(m.movie_ids)}
    counts = np.zeros(len(index), dtype=np.int64)
    with open(os.path.join(directory, "history.csv"), newline="") as f:
        for row in list(csv.reader(f))[1:]:
            counts[index[int(row[1])]] += 1
    order = np.lexsort((np.arange(len(counts)), -counts))
    rows = [i for i in order if counts[i] >= 10][:200]
    e = _item_embeddings(directory)[rows]
    u = e / np.linalg.norm(e, axis=1, keepdims=True)
    c = u @ u.T
    return (c.sum() - np.trace(c)) / (len(rows) * (len(rows) - 1))


@pytest.fixture(scope="module")
def fixture_dir():
    if not _DIR:
        pytest.fail("QKV_TEST_RECIPES_DIR is not set (ctest's python.recommender_weak sets it)")
    return _DIR


def test_the_30_epoch_model_warns(fixture_dir):
    d = os.path.join(fixture_dir, "sasrec-30")
    with pytest.warns(UserWarning, match=r"movie embeddings have collapsed: their mean pairwise cosine "
                                         r"is 0\.(6[5-9]|[7-9]\d)\d over the 200 most-rated movies, above 0\.65.*"
                                         r"train longer") as caught:
        m = rec.Recommender(d)
    assert len([w for w in caught if "collapsed" in str(w.message)]) == 1
    assert caught[0].filename == __file__  # the warning points at the caller's line
    assert len(m.warnings) == 1 and m.health["mean_cosine"] > 0.65 and m.health["movies"] == 200
    assert m.health["mean_cosine"] == pytest.approx(_twin_mean_cosine(m, d), abs=1e-9)
    # Its validation HR@10, as training recorded it, beside popularity's.
    assert m.health["validation"] > m.health["baseline_validation"] > 0.5


def test_the_recipe_model_is_silent(fixture_dir):
    d = os.path.join(fixture_dir, "sasrec-recipe")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = rec.Recommender(d)
    assert m.warnings == []
    assert m.health["mean_cosine"] < 0.65
    assert m.health["mean_cosine"] == pytest.approx(_twin_mean_cosine(m, d), abs=1e-9)
    assert m.health["validation"] > m.health["baseline_validation"]
