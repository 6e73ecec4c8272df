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
