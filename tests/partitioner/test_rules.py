"""Which tensors' types planning reads: none that only ONNX-ML nodes write and read."""
from __future__ import annotations

from onnx import TensorProto as T
from onnx import helper as h

from partitioner.graph import GraphIndex
from partitioner.rules import Rules, types_planning_reads


def _index(nodes: list, outputs: list[str]) -> GraphIndex:
    x = h.make_tensor_value_info("x", T.FLOAT, ["batch", 4])
    graph = h.make_graph(nodes, "g", [x], [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs])
    return GraphIndex.build(graph)


def _ml(op: str, inputs: list[str], outputs: list[str]):  # type: ignore[no-untyped-def]
    return h.make_node(op, inputs, outputs, domain="ai.onnx.ml")


def test_only_onnx_ml_readers_and_writers() -> None:
    index = _index([_ml("Scaler", ["x"], ["s"]), _ml("Normalizer", ["s"], ["y"])], ["y"])
    assert types_planning_reads(index, ["s", "y"], Rules()) == []


def test_a_standard_node_after_or_before_counts() -> None:
    after = _index([_ml("Scaler", ["x"], ["s"]), _ml("Normalizer", ["s"], ["n"]), h.make_node("Relu", ["n"], ["y"])],
                   ["y"])
    assert types_planning_reads(after, ["s", "n"], Rules()) == ["s", "n"]  # Relu reads n, which depends on s
    before = _index([h.make_node("Relu", ["x"], ["r"]), _ml("Scaler", ["r"], ["s"]), _ml("Normalizer", ["s"], ["y"])],
                    ["y"])
    assert types_planning_reads(before, ["s"], Rules()) == ["s"]  # its readers run after what TensorRT may take
    beside = _index([_ml("Scaler", ["x"], ["s"]), h.make_node("Relu", ["x"], ["r"]),
                     _ml("FeatureVectorizer", ["s", "r"], ["y"])], ["y"])
    assert types_planning_reads(beside, ["s"], Rules()) == ["s"]  # read after a node TensorRT may take
