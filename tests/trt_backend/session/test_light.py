"""The ONNX light models (real architectures, small weights) through the stitched session: whole,
and cut into many segments, equal to whole-model ONNX Runtime at atol 1e-5."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from tests.support.graphs import assert_same, ort_reference
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]
SLOW = {"vgg19", "zfnet512", "bvlc_alexnet"}  # big fully connected weights: ONNX Runtime takes seconds to load them


def _load(light_dir: str, name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(light_dir, f"light_{name}.onnx"))


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    (x,) = [i for i in model.graph.input if i.name not in inits]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    return {x.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in LIGHT])
def test_light_model_whole(light_dir, name) -> None:
    model = _load(light_dir, name)
    sess = Session(model, options=SessionOptions(emulate=True))
    assert sess.segment_executors == ["emulated"]  # TensorRT takes every one of them whole
    feeds = _feeds(model)
    assert_same(sess.run(None, feeds), ort_reference(model, feeds))


@pytest.mark.parametrize("name, exclude, at_least", [
    ("squeezenet", ("Concat",), 15),
    ("inception_v1", ("Concat", "LRN"), 15),
    ("resnet50", ("Sum",), 25),
    ("shufflenet", ("Transpose",), 7),
])
def test_light_model_cut_into_many_segments(light_dir, name, exclude, at_least) -> None:
    model = _load(light_dir, name)
    sess = Session(model, options=SessionOptions(emulate=True, exclude_ops=exclude, min_segment_size=1))
    assert len(sess.plan.segments) >= at_least
    assert set(sess.segment_executors) == {"emulated", "onnxruntime"}
    for seed in (0, 1):
        feeds = _feeds(model, seed)
        assert_same(sess.run(None, feeds), ort_reference(model, feeds))
