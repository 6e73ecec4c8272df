"""Capability with the real TensorRT(-RTX) parser and the static rules."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from partitioner import Claim, PartitionOptions, plan_model
from partitioner.capability import Piece, QueryResult
from partitioner.model import check_model
from tests.helpers import assert_plan_valid, const, crop_resize, model, vi

ONE = PartitionOptions(min_segment_size=1)


def relus(start: str, n: int, prefix: str) -> tuple[list[onnx.NodeProto], str]:
    nodes, prev = [], start
    for k in range(n):
        nodes.append(helper.make_node("Relu", [prev], [f"{prefix}{k}"], name=f"{prefix}{k}"))
        prev = f"{prefix}{k}"
    return nodes, prev


def relus_resize_relus() -> onnx.ModelProto:
    """Relu x3 -> Resize(tf_crop_and_resize, which TensorRT rejects) -> Relu x3 (node 3 is the Resize)."""
    a, last = relus("x", 3, "a")
    rz, inits = crop_resize(last, "r")
    b, _ = relus("r", 3, "b")
    b[-1].output[0] = "y"
    return model(a + [rz] + b, [vi("x", ["N", 3, 8, 8])], [vi("y", ["N", 3, 8, 8])], inits)


def test_parser_rejection_gives_reason_and_splits(oracle) -> None:
    m = relus_resize_relus()
    plan = plan_model(m, oracle, PartitionOptions(boundary_cost=None))  # three Relus do not pay their hand-overs
    assert [(s.backend, len(s.nodes)) for s in plan.segments] == [("tensorrt", 3), ("onnxruntime", 1), ("tensorrt", 3)]
    reason = plan.nodes[3].reason or ""
    assert reason.startswith("TensorRT parser: UNSUPPORTED_NODE") and "transformation modes" in reason
    assert (plan.tensorrt or "").startswith("tensorrt")
    assert_plan_valid(plan)


def test_every_unsupported_node_found_and_pieces_reparsed(oracle) -> None:
    nodes, inits, prev = [], [], "x"
    for k in range(5):
        chunk, prev = relus(prev, 4, f"c{k}_")
        nodes += chunk
        if k < 4:
            rz, ri = crop_resize(prev, f"rz{k}")
            nodes.append(rz)
            inits += ri
            prev = f"rz{k}"
    nodes[-1].output[0] = "y"
    plan = plan_model(model(nodes, [vi("x", ["N", 3, 8, 8])], [vi("y", ["N", 3, 8, 8])], inits), oracle,
                      PartitionOptions(boundary_cost=None))
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime"] * 4 + ["tensorrt"]
    assert sum(n.verdict == "tensorrt" for n in plan.nodes) == 20
    assert plan.oracle_calls >= 2  # one whole-model question, then each unverified piece alone
    assert_plan_valid(plan)


def test_a_constant_is_copied_into_the_question_of_the_nodes_reading_it(oracle) -> None:
    """An axes Constant listed before a node the parser refuses (a uint8 Gather dequantized with a
    nonzero zero point, as ONNX Runtime's quantizer writes embeddings): the parser's bisection put
    the Constant in a group with the Gather, refused the group without naming a node, and the
    Unsqueeze and Squeeze reading the axes were then asked with them as a network input and
    refused ("axis is not a constant"), cutting the model into five segments. A question now
    carries a copy of the constants its nodes read, as a segment does."""
    nodes = [helper.make_node("Constant", [], ["ax"], value=numpy_helper.from_array(np.array([1], np.int64)),
                              name="c_ax"),
             helper.make_node("Gather", ["W", "ids"], ["g"], name="gather_u8"),
             helper.make_node("DequantizeLinear", ["g", "sc", "zp"], ["gf"], name="dq"),
             helper.make_node("Relu", ["gf"], ["r"], name="relu"),
             helper.make_node("Unsqueeze", ["r", "ax"], ["u"], name="unsq"),
             helper.make_node("Mul", ["u", "u"], ["m"], name="mul"),
             helper.make_node("Squeeze", ["m", "ax"], ["y"], name="sq")]
    inits = [const("W", np.arange(40, dtype=np.uint8).reshape(10, 4)), const("sc", np.array(0.1, np.float32)),
             const("zp", np.array(3, np.uint8))]
    m = model(nodes, [vi("ids", ["b", 5], TensorProto.INT64)], [vi("y", ["b", 5, 4])], inits)
    plan = plan_model(m, oracle, PartitionOptions(boundary_cost=None, min_segment_size=1))
    on_trt = sorted(n.name for n in plan.nodes if n.verdict == "tensorrt")
    assert on_trt == ["c_ax", "mul", "relu", "sq", "unsq"], [(n.name, n.reason) for n in plan.nodes]
    assert [s.backend for s in plan.segments] == ["onnxruntime", "tensorrt"]
    assert not any("axis is not a constant" in (n.reason or "") for n in plan.nodes)
    assert_plan_valid(plan)


def test_iteration_bound_is_honoured(oracle) -> None:
    m = relus_resize_relus()
    plan = plan_model(m, oracle, PartitionOptions(max_oracle_calls=1, min_segment_size=1))
    assert plan.oracle_calls == 1
    assert all(n.verdict == "onnxruntime" for n in plan.nodes)
    assert plan.nodes[0].reason == "capability check stopped after 1 parser calls"
    assert (plan.nodes[3].reason or "").startswith("TensorRT parser:")


def test_sequence_ops_fall_back_by_rule(oracle) -> None:
    pre, _ = relus("x", 2, "p")
    nodes = pre + [helper.make_node("SplitToSequence", ["p1"], ["seq"], axis=1, name="split"),
                   helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=1, name="cat")]
    post, _ = relus("cat", 2, "q")
    post[-1].output[0] = "y"
    plan = plan_model(model(nodes + post, [vi("x", ["N", 4])], [vi("y", ["N", 4])]), oracle, ONE)
    verdicts = {n.name: (n.verdict, n.reason) for n in plan.nodes}
    assert verdicts["split"] == ("onnxruntime", "SplitToSequence works on sequence/optional values, "
                                                "which TensorRT cannot hold")
    assert verdicts["p0"][0] == verdicts["q1"][0] == "tensorrt"
    for seg in plan.segments:
        check_model(plan.extract(seg.id), where=f"segment {seg.id}", full=True)


def test_onnx_ml_and_custom_domains_fall_back(oracle) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("Scaler", ["a"], ["b"], domain="ai.onnx.ml", offset=[0.5], scale=[2.0], name="scale"),
             helper.make_node("Gelu", ["b"], ["y"], domain="com.microsoft", name="gelu")]
    m = model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], extra_opsets=[("ai.onnx.ml", 3), ("com.microsoft", 1)])
    plan = plan_model(m, oracle, ONE)
    assert plan.nodes[1].reason == "ai.onnx.ml operators are not TensorRT operators"
    assert plan.nodes[2].reason == "custom domain 'com.microsoft' is unknown to TensorRT"
    seg = plan.extract(1)
    ort.InferenceSession(seg.SerializeToString(), providers=["CPUExecutionProvider"])


def test_string_tensors_fall_back(oracle) -> None:
    nodes = [helper.make_node("Cast", ["x"], ["s"], to=TensorProto.STRING, name="to_str"),
             helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT, name="to_float")]
    plan = plan_model(model(nodes, [vi("x", ["N"])], [vi("y", ["N"])]), oracle, ONE)
    assert plan.nodes[0].reason == "tensor 's' is a string value, which TensorRT cannot hold"
    assert [s.backend for s in plan.segments] == ["onnxruntime"]


def test_user_exclusions(oracle) -> None:
    a, _ = relus("x", 4, "a")
    a[-1].output[0] = "y"
    plan = plan_model(model(a, [vi("x", ["N", 4])], [vi("y", ["N", 4])]), oracle,
                      PartitionOptions(exclude_nodes=("a1",), min_segment_size=1))
    assert [(n.verdict, n.reason) for n in plan.nodes][1] == ("onnxruntime", "excluded by user (node name 'a1')")
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]


def if_model() -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("Add", ["a", "a"], ["o1"])], "then", [], [vi("o1", ["N", 4])])
    other = helper.make_graph([helper.make_node("Mul", ["a", "a"], ["o2"])], "else", [], [vi("o2", ["N", 4])])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["b"], then_branch=then, else_branch=other, name="if"),
             helper.make_node("Relu", ["b"], ["y"], name="r2")]
    return model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], [const("zero", np.array(0, np.float32))])


def test_if_with_supported_bodies_goes_to_tensorrt_whole(oracle) -> None:
    plan = plan_model(if_model(), oracle, ONE)
    assert [(s.backend, s.nodes) for s in plan.segments] == [("tensorrt", (0, 1, 2, 3, 4))]


def test_if_with_excluded_body_op_falls_back_with_outer_scope_captured(oracle) -> None:
    plan = plan_model(if_model(), oracle, PartitionOptions(exclude_ops=("Mul",), min_segment_size=1))
    assert plan.nodes[3].reason == "If body: contains Mul, excluded by user"
    seg = plan.segments[plan.nodes[3].segment]
    assert seg.backend == "onnxruntime" and seg.inputs == ("c", "a")  # 'a' is read only inside the branches
    sub = plan.extract(seg.id)
    check_model(sub, where="if segment", full=True)
    sess = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"])
    a = np.array([[1, 2, 3, 4]], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(True), "a": a})[0], a + a)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(False), "a": a})[0], a * a)


def test_loop_body_reading_outer_scope(oracle) -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "step"], ["acc_out"])],
        "body", [vi("iter", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", ["N", 4])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", ["N", 4])])
    nodes = [helper.make_node("Relu", ["x"], ["step"], name="r"),
             helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body, name="loop")]
    m = model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], [const("trips", np.array(3, np.int64))])
    plan = plan_model(m, oracle, PartitionOptions(exclude_nodes=("loop",), min_segment_size=1))
    assert plan.nodes[0].verdict == "tensorrt"
    loop_seg = plan.segments[plan.nodes[1].segment]
    assert loop_seg.backend == "onnxruntime" and loop_seg.inputs == ("x", "step")  # 'step': body's outer read
    sub = plan.extract(loop_seg.id)
    assert list(sub.graph.node[0].input) == ["trips", "", "x"]  # empty optional input kept
    sess = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.ones((2, 4), np.float32)
    feeds = {"x": x, "step": np.full((2, 4), 0.5, np.float32)}
    np.testing.assert_allclose(sess.run(None, feeds)[0], x + 1.5)


def test_unknown_rank_input_stays_in_onnxruntime(oracle) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    nodes, _ = relus("x", 3, "a")
    nodes[-1].output[0] = "y"
    plan = plan_model(model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), oracle, ONE)
    assert plan.nodes[0].reason == "rank of input 'x' is unknown (a TensorRT input needs a known rank)"
    assert [s.backend for s in plan.segments] == ["onnxruntime"]


def test_unknown_dtype_after_custom_op(oracle) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("Mystery", ["a"], ["b"], domain="my.ops", name="mystery"),
             helper.make_node("Relu", ["b"], ["c"], name="r1"),
             helper.make_node("Relu", ["c"], ["y"], name="r2")]
    m = model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], extra_opsets=[("my.ops", 1)])
    plan = plan_model(m, oracle, ONE)
    assert plan.nodes[2].reason == "dtype of input 'b' is unknown after shape inference"
    assert plan.nodes[3].reason == "dtype of input 'c' is unknown after shape inference"
    assert plan.nodes[0].verdict == "tensorrt"
    assert_plan_valid(plan)


def test_empty_optional_input_preserved(oracle) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("Clip", ["a", "", "hi"], ["b"], name="clip"),
             helper.make_node("Sin", ["b"], ["y"], name="sin")]
    m = model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], [const("hi", np.array(0.5, np.float32))])
    plan = plan_model(m, oracle, PartitionOptions(exclude_ops=("Sin",), min_segment_size=1))
    sub = plan.extract(0)
    assert list(sub.graph.node[1].input) == ["a", "", "hi"]
    check_model(sub, where="segment 0", full=True)
    out = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.array([[-1, 0.25, 1, 2]], np.float32)})[0]
    np.testing.assert_array_equal(out, [[0, 0.25, 0.5, 0.5]])


class ResizeClaim:
    name = "resize"

    def claim(self, node: onnx.NodeProto, model) -> Claim:
        return Claim(node.op_type == "Resize")


def test_plugin_claim_keeps_node_in_tensorrt_segment(oracle) -> None:
    m = relus_resize_relus()
    plan = plan_model(m, oracle, PartitionOptions(plugins=(ResizeClaim(),)))
    assert plan.nodes[3].verdict == "plugin:resize" and plan.nodes[3].reason is None
    assert [(s.backend, len(s.nodes)) for s in plan.segments] == [("tensorrt", 7)]
    assert_plan_valid(plan)


def test_unknown_exclusion_is_an_error(oracle) -> None:
    from partitioner import OptionsError

    with pytest.raises(OptionsError, match="unknown op type 'Reluu'"):
        plan_model(if_model(), oracle, PartitionOptions(exclude_ops=("Reluu",)))
    with pytest.raises(OptionsError, match="no node named 'nope'"):
        plan_model(if_model(), oracle, PartitionOptions(exclude_nodes=("nope",)))
    # a node inside an If's branch: named where it sits, and what to exclude instead ("no node named" before)
    m = if_model()
    next(a for a in m.graph.node[3].attribute if a.name == "then_branch").g.node[0].name = "inner_add"
    with pytest.raises(OptionsError, match=r"node 'inner_add' of .* is inside the subgraph of 'if' \(If\), its "
                                           r"then_branch, which runs whole where the node holding it runs: exclude "
                                           r"that node instead"):
        plan_model(m, oracle, PartitionOptions(exclude_nodes=("inner_add",)))


def scatter_chain() -> onnx.ModelProto:
    """Relu -> ScatterElements(reduction=add) -> Relu -> ScatterElements(reduction=none) -> Relu, as a
    graph network sums messages into its nodes. TensorRT-RTX 1.7's parser refuses the reduction
    without naming the node (its error names only ScatterElements' importer)."""
    idx = const("idx", np.array([[0, 1, 0, 2], [3, 1, 2, 0]], np.int64))
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu0"),
             helper.make_node("ScatterElements", ["a", "idx", "u"], ["s_add"], axis=0, reduction="add",
                              name="scatter_add"),
             helper.make_node("Relu", ["s_add"], ["b"], name="relu1"),
             helper.make_node("ScatterElements", ["b", "idx", "u"], ["s_set"], axis=0, name="scatter_set"),
             helper.make_node("Relu", ["s_set"], ["y"], name="relu2")]
    return model(nodes, [vi("x", [4, 4]), vi("u", [2, 4])], [vi("y", [4, 4])], [idx])


def test_a_group_refused_without_naming_a_node_is_narrowed_to_the_op_its_error_names(oracle) -> None:
    """A graph network's ScatterElements with a reduction sent every one of its 718 nodes to ONNX
    Runtime ("rejected this group without naming a node"): the parser's error names the op's
    importer, whose nodes are asked alone; only the refused one falls back, with the parser's reason."""
    plan = plan_model(scatter_chain(), oracle, PartitionOptions(boundary_cost=None, min_segment_size=1))
    verdicts = {n.name: (n.verdict, n.reason) for n in plan.nodes}
    if verdicts["scatter_add"][0] == "tensorrt":
        pytest.skip(f"{plan.tensorrt} takes ScatterElements with a reduction")
    assert [name for name, (v, _) in verdicts.items() if v != "tensorrt"] == ["scatter_add"], verdicts
    assert "reduction" in (verdicts["scatter_add"][1] or ""), verdicts["scatter_add"]
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    assert_plan_valid(plan)
    feeds = {"x": np.arange(16, dtype=np.float32).reshape(4, 4) - 8, "u": np.ones((2, 4), np.float32)}
    expected = ort.InferenceSession(scatter_chain().SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    from trt_backend import Session

    got = Session(scatter_chain(), None).run(None, feeds)
    np.testing.assert_array_equal(got[0], expected[0])


class _Unnamed:
    """An oracle answering as TensorRT-RTX's parser does where an importer fails without naming
    its node: any question holding a node named ``bad...`` is refused whole, naming no node and no
    op; any other is taken."""

    target = "scripted"

    def __init__(self) -> None:
        self.questions: list[int] = []

    def query(self, m: onnx.ModelProto) -> QueryResult:
        self.questions.append(len(m.graph.node))
        if any(n.name.startswith("bad") for n in m.graph.node):
            return QueryResult(False, (Piece(tuple(range(len(m.graph.node))), False),), {},
                               unnamed="UNSUPPORTED_NODE: refused [importSomething]")
        return QueryResult(True, (Piece(tuple(range(len(m.graph.node))), True),))


def test_without_an_op_to_blame_the_group_is_halved_until_the_culprit_is_alone() -> None:
    nodes, prev = relus("x", 7, "r")
    nodes.append(helper.make_node("Neg", [prev], ["n"], name="bad_neg"))
    more, _ = relus("n", 8, "s")
    more[-1].output[0] = "y"
    oracle = _Unnamed()
    plan = plan_model(model(nodes + more, [vi("x", ["N", 4])], [vi("y", ["N", 4])]), oracle,
                      PartitionOptions(boundary_cost=None, min_segment_size=1))
    off = [(n.name, n.reason) for n in plan.nodes if n.verdict != "tensorrt"]
    assert off == [("bad_neg", "TensorRT parser: UNSUPPORTED_NODE: refused [importSomething]")]
    assert len(oracle.questions) <= 2 * 5 + 1  # one question, then two per halving of 16 nodes
    assert_plan_valid(plan)


def test_an_input_the_parser_cannot_type_is_named_with_its_words(oracle) -> None:
    """A uint16 input: TensorRT-RTX's parser refuses the nodes reading it with an error that names
    no node (its input importer's); they said "left out of every supported subgraph"."""
    nodes = [helper.make_node("Identity", ["x"], ["xi"], name="id"),
             helper.make_node("Cast", ["xi"], ["c"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["y"], name="neg")]
    m = model(nodes, [vi("x", [4], TensorProto.UINT16)], [vi("y", [4])])
    plan = plan_model(m, oracle, PartitionOptions(boundary_cost=None, min_segment_size=1))
    verdicts = {n.name: (n.verdict, n.reason or "") for n in plan.nodes}
    if verdicts["id"][0] == "tensorrt":
        pytest.skip(f"{plan.tensorrt} takes uint16 inputs")
    assert verdicts["relu"][0] == verdicts["neg"][0] == "tensorrt"
    assert verdicts["id"][1].startswith("TensorRT parser: ") and "left this node out" not in verdicts["id"][1], verdicts
    assert_plan_valid(plan)
