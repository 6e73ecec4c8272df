"""``trt_backend.onnx_backend`` as an ``onnx.backend``: prepare/run_model/run_node/supports_device, the
ONNX backend node cases against ONNX Runtime alone (a subset: the full run is
benchmarks/conformance/backend_node_cases.py), and onnx's own backend test runner on its stored models."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.support.onnx_backend_cases import PASSED, load_cases, run_ort, run_ours
from trt_backend import onnx_backend as backend
from trt_backend.errors import FeedError, OptionsError, TensorRTUnavailableError

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser

EVERY = 8  # about 235 of the 1884 cases


@pytest.fixture(scope="module")
def node_cases() -> list:
    return load_cases(every=EVERY)


@pytest.mark.slow
def test_node_cases_pass_wherever_onnxruntime_alone_passes(node_cases) -> None:
    ort_passed, ours_passed, regressions = 0, 0, []
    trt_nodes = all_nodes = 0
    for case in node_cases:
        ort_verdict, _ = run_ort(case)
        our_verdict, why, (on_trt, nodes) = run_ours(case)
        ort_passed += ort_verdict == PASSED
        ours_passed += our_verdict == PASSED
        if our_verdict == PASSED:
            trt_nodes += on_trt
            all_nodes += nodes
        elif ort_verdict == PASSED:
            regressions.append(f"{case.name}: {why}")
    assert not regressions, regressions
    assert ours_passed >= ort_passed > 0.8 * len(node_cases)
    assert trt_nodes / all_nodes > 0.5  # most nodes of passing cases sit in TensorRT segments


def test_prepare_and_run_with_list_dict_and_single_array() -> None:
    node = h.make_node("Relu", ["x"], ["y"])
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2, 3])]),
                     opset_imports=[h.make_opsetid("", 17)])
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    rep = backend.prepare(m, "CPU")
    for inputs in ([x], {"x": x}, x):
        (y,) = rep.run(inputs)
        np.testing.assert_array_equal(y, np.maximum(x, 0))
    # outputs by name too (onnx's namedtupledict, typed as a plain tuple)
    assert rep.run([x])["y"] is not None  # type: ignore[call-overload]
    np.testing.assert_array_equal(backend.run_model(m, [x])[0], np.maximum(x, 0))
    with pytest.raises(FeedError, match="got 2 input"):
        rep.run([x, x])


def test_dynamic_model_without_profiles_gets_one_per_input_shapes() -> None:
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Mul", ["a", "a"], ["b"]),
             h.make_node("Add", ["b", "x"], ["y"])]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                                  [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])]),
                     opset_imports=[h.make_opsetid("", 17)])
    rep = backend.prepare(m, "CPU")
    assert rep.session is None  # no profile: made per shape at run time
    for n in (1, 3, 1):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(rep.run([x])[0], np.maximum(x, 0) ** 2 + x, rtol=1e-6)
    assert len(rep._by_shapes) == 2
    given = backend.prepare(m, "CPU", profiles=[{"x": ((1, 4), (2, 4), (8, 4))}], min_segment_size=1)
    assert given.session is not None and given.session.segment_executors == ["emulated"]
    with pytest.raises(OptionsError, match="say graph_optimization_level"):  # a renamed option is named
        backend.prepare(m, "CPU", optimization_level="basic")
    tuned = backend.prepare(m, "CPU", graph_optimization_level="basic", intra_op_threads=1)
    assert (tuned.options.ort.graph_optimization_level, tuned.options.ort.intra_op_threads) == ("basic", 1)


def test_run_node() -> None:
    node = h.make_node("Add", ["a", "b"], ["c"])
    a, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    (c,) = backend.run_node(node, [a, b])
    np.testing.assert_array_equal(c, a + b)
    (c,) = backend.run_node(node, {"a": a, "b": b}, outputs_info=[(np.float32, (2, 3))], opset_version=13)
    np.testing.assert_array_equal(c, a + b)
    topk = h.make_node("TopK", ["x", "k"], ["v", "i"])
    v, i = backend.run_node(topk, [np.array([[3, 1, 2]], np.float32), np.array([2], np.int64)])
    np.testing.assert_array_equal(v, [[3, 2]])
    np.testing.assert_array_equal(i, [[0, 2]])


def test_devices() -> None:
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")  # no GPU runtime here (and no TensorRT runner yet)
    assert not backend.supports_device("TPU")
    m = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                                  [h.make_tensor_value_info("x", T.FLOAT, [2])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2])]),
                     opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(TensorRTUnavailableError, match=r"^cannot execute TensorRT segments: .+; use emulate=True "
                                                       r"\(or 'auto'\) to run them through ONNX Runtime$"):
        backend.prepare(m, "CUDA", min_segment_size=1)
    assert backend.TrtBackend.is_compatible(m, "CPU")


SIMPLE = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "simple")


def _read(path: str, tp: onnx.TypeProto) -> object:
    kind = tp.WhichOneof("value")
    with open(path, "rb") as f:
        data = f.read()
    if kind == "sequence_type":
        sequence = onnx.SequenceProto()
        sequence.ParseFromString(data)
        return onnx.numpy_helper.to_list(sequence)
    if kind == "optional_type":
        optional = onnx.OptionalProto()
        optional.ParseFromString(data)
        return onnx.numpy_helper.to_optional(optional)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return onnx.numpy_helper.to_array(tensor)


def _stored_case(name: str) -> tuple[onnx.ModelProto, list, list]:
    folder = os.path.join(SIMPLE, name)
    model = onnx.load(os.path.join(folder, "model.onnx"))
    inits = {t.name for t in model.graph.initializer}
    ins = [i for i in model.graph.input if i.name not in inits]
    data = os.path.join(folder, "test_data_set_0")
    inputs = [_read(os.path.join(data, f"input_{k}.pb"), vi.type) for k, vi in enumerate(ins)]
    outputs = [_read(os.path.join(data, f"output_{k}.pb"), vi.type) for k, vi in enumerate(model.graph.output)]
    return model, inputs, outputs


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(SIMPLE) if "gradient" not in n))
def test_models_stored_in_the_onnx_package(name) -> None:
    """onnx's stored "simple" models (sequences, string ops, Expand, Shrink...) with their
    reference outputs, through prepare/run, where ONNX Runtime alone gets them right."""
    from onnx.backend.test.runner import Runner

    model, inputs, expected = _stored_case(name)
    ort_verdict, why = run_ort(_Case(name, model, [(inputs, expected)]))
    if ort_verdict != PASSED:
        pytest.skip(f"ONNX Runtime alone fails it here: {why}")
    rep = backend.prepare(model, "CPU")
    Runner.assert_similar_outputs(expected, list(rep.run(inputs)), rtol=1e-3, atol=1e-7)


class _Case:
    def __init__(self, name: str, model: onnx.ModelProto, data_sets: list) -> None:
        self.name, self.model, self.data_sets, self.rtol, self.atol = name, model, data_sets, 1e-3, 1e-7
