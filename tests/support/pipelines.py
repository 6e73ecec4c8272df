"""Models as exporters write them: an skl2onnx pipeline whose ai.onnx.ml nodes leave types unknown."""
from __future__ import annotations

import numpy as np
import pytest


def mlp_pipeline():
    pytest.importorskip("sklearn")  # (the test extra installs both)
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(4)
    X = rng.standard_normal((120, 8)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64) + (X[:, 2] > 1)
    pipe = make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(16, 8), max_iter=300,
                                                         random_state=0)).fit(X, y)
    return skl2onnx.convert_sklearn(pipe, initial_types=[("X", FloatTensorType([None, 8]))],
                                    target_opset={"": 17, "ai.onnx.ml": 3})


def digits_classifier():
    """A scikit-learn MLP trained on the first 1,200 of sklearn's digits (8x8 images scaled to
    0..1), converted by skl2onnx without ZipMap: outputs ``label`` [N] (int64) and
    ``probabilities`` [N, 10], input ``X`` [N, 64] with N unnamed. Returns (the model, all 1,797
    images as float32 rows: those from 1,200 on were not trained on)."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    import warnings

    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    digits = load_digits()
    X, y = digits.data.astype(np.float32) / 16, digits.target
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=200, random_state=0).fit(X[:1200], y[:1200])
    proto = skl2onnx.convert_sklearn(clf, initial_types=[("X", FloatTensorType([None, 64]))],
                                     target_opset={"": 17, "ai.onnx.ml": 3}, options={id(clf): {"zipmap": False}})
    return proto, X



CODE_CATEGORIES = ((3, 7, 11, 20), (1, 2))  # the columns of categorical_classifier("codes")'s input
CITIES = ("oslo", "paris", "rome")  # the values of categorical_classifier("city")'s input


def categorical_classifier(kind: str):
    """A scikit-learn OneHotEncoder (handle_unknown="error") and an MLP, converted by skl2onnx
    without ZipMap: skl2onnx writes the encoder as an ai.onnx.ml OneHotEncoder with zeros=0, which
    fails the run on a value it does not know. ``kind`` "codes": input ``codes`` [N, 2] (int64, the
    columns taking CODE_CATEGORIES: skl2onnx Gathers each column for its own encoder); "city":
    input ``city`` [N, 1] (strings, CITIES). Outputs ``label`` [N] and ``probabilities`` [N, 2].
    Returns (the model, a feed of 24 real rows)."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    import warnings

    from skl2onnx.common.data_types import Int64TensorType, StringTensorType
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    rng = np.random.default_rng(5)
    if kind == "codes":
        X = np.stack([rng.choice(c, 300) for c in CODE_CATEGORIES], axis=1).astype(np.int64)
        y = ((X[:, 0] > 7) ^ (X[:, 1] == 2)).astype(np.int64)
        types = [("codes", Int64TensorType([None, 2]))]
    else:
        X = rng.choice(CITIES, (300, 1)).astype(object)
        y = (X[:, 0] == "rome").astype(np.int64)
        types = [("city", StringTensorType([None, 1]))]
    pipe = make_pipeline(OneHotEncoder(), MLPClassifier(hidden_layer_sizes=(32, 16), max_iter=300, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipe.fit(X, y)
    proto = skl2onnx.convert_sklearn(pipe, initial_types=types, target_opset={"": 17, "ai.onnx.ml": 3},
                                     options={id(pipe): {"zipmap": False}})
    return proto, {types[0][0]: X[:24]}
