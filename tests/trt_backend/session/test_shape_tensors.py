"""Whatever runs also builds: a segment input TensorRT reads as a shape tensor
gets min/opt/max values from calibration even where the session's rules do not see it used as a
shape (here a shape computed on ONNX Runtime, reshaped, then given to Expand), so the build never
asks the user for values of a tensor they cannot name."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.support.graphs import assert_same, ort_reference
from trt_backend.artifacts.write import build as build_folder_build
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session


def computed_shape_model():
    inits = [nh.from_array(np.array([-1], np.int64), "flat"), nh.from_array(np.array([2], np.int64), "two")]
    nodes = [h.make_node("Shape", ["x"], ["s"]),                         # on ONNX Runtime (excluded)
             h.make_node("Mul", ["s", "two"], ["s2"]),                    # ... and so is this
             h.make_node("Reshape", ["s2", "flat"], ["target"]),          # TensorRT from here
             h.make_node("Expand", ["one", "target"], ["ones"]),
             h.make_node("Relu", ["ones"], ["r"]), h.make_node("Neg", ["r"], ["y"])]
    graph = h.make_graph(nodes, "computed_shape", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
                                                    h.make_tensor_value_info("one", T.FLOAT, [1, 1])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_shape_computed_elsewhere_builds_without_asking(flavor, tmp_path) -> None:
    m = computed_shape_model()
    profiles = [{"x": ((1, 4), (2, 4), (4, 4))}]
    opts = SessionOptions(emulate=True, exclude_ops=("Shape", "Mul"), min_segment_size=1)
    sess = Session(m, profiles, opts)
    tail = sess.plan.segments[-1]
    assert tail.backend == "tensorrt" and tail.inputs[0] == "s2"
    s2 = sess.segment_profiles[tail.id][0]["s2"]
    assert s2.values == ((2, 8), (4, 8), (8, 8)) and s2.source == "calibrated"
    for n in (1, 3, 4):
        feeds = {"x": np.zeros((n, 4), np.float32), "one": np.ones((1, 1), np.float32)}
        assert_same(sess.run(None, feeds), ort_reference(m, feeds))
    manifest = build_folder_build(m, str(tmp_path / "b"), profiles, opts)  # (asked for values before)
    assert [s["backend"] for s in manifest["segments"]][-1] == "tensorrt"
    assert manifest["segments"][-1]["engine_bytes"] > 0


def test_shape_values_outside_the_profiles_are_a_feed_error_before_anything_runs() -> None:
    """An input TensorRT reads as a shape (a Reshape's target) given values outside those its
    profile was built for: check_feeds took it and the run failed inside the segment's runner with
    a ProfileError, which a server catching FeedError for bad requests missed. It is a FeedError
    of the feed check, on the checked-feeds shortcut of a serving loop too."""
    import pytest

    from trt_backend.errors import FeedError

    graph = h.make_graph([h.make_node("Relu", ["x"], ["a"]), h.make_node("Reshape", ["a", "shape"], ["b"]),
                          h.make_node("Sigmoid", ["b"], ["y"])], "rs",
                         [h.make_tensor_value_info("x", T.FLOAT, [2, 6]),
                          h.make_tensor_value_info("shape", T.INT64, [2])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["p", "q"])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    sess = Session(model, [{"shape": {"min": (2,), "opt": (2,), "max": (2,), "values": ((3, 4), (3, 4), (4, 6))}}],
                   SessionOptions(emulate=True, min_segment_size=1))
    assert sess.plan.tensorrt_segments()
    x = np.ones((2, 6), np.float32)
    (y,) = sess.run(None, {"x": x, "shape": np.array([3, 4], np.int64)})  # inside: runs (and is memoised)
    assert y.shape == (3, 4)
    said = r"input 'shape': values \(2, 6\) are outside every profile \(TensorRT reads it as a shape"
    with pytest.raises(FeedError, match=said):
        sess.check_feeds({"x": x, "shape": np.array([2, 6], np.int64)})
    with pytest.raises(FeedError, match=said):
        sess.run(None, {"x": x, "shape": np.array([2, 6], np.int64)})
    sess.close()
