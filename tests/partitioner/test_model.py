"""Loading and normalizing: every bad input gets one clear error of our own type."""
from __future__ import annotations

import os
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from partitioner import InvalidModelError, ModelLoadError, TrtBackendError, load_model
from partitioner.model import (
    FIX_INPUT_DIMS,
    FIX_IR_VERSION,
    FIX_NODE_NAMES,
    FIX_UNKNOWN_DIMS,
    PARSER_NEUTRAL_FIXES,
    _parse,
    check_model,
)
from tests.helpers import const, model, vi


def relu_model(**kw) -> onnx.ModelProto:
    return model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 4])], [vi("y", ["N", 4])], **kw)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match=r"nope\.onnx: no such file"):
        load_model(str(tmp_path / "nope.onnx"))


def test_not_onnx(tmp_path) -> None:
    p = tmp_path / "notes.onnx"
    p.write_text("this is not a model\n" * 10)
    with pytest.raises(ModelLoadError, match=r"notes\.onnx: not an ONNX model"):
        load_model(str(p))


def test_empty_file(tmp_path) -> None:
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="file is empty"):
        load_model(str(p))


def test_truncated(tmp_path, light_dir) -> None:
    data = open(os.path.join(light_dir, "light_squeezenet.onnx"), "rb").read()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=r"cut\.onnx: not an ONNX model or truncated"):
        load_model(str(p))


def test_a_pipe_and_a_device_are_read_as_files_are(tmp_path, light_dir) -> None:
    """Regular files are mapped into memory to be parsed; what cannot be mapped is read."""
    path = os.path.join(light_dir, "light_squeezenet.onnx")
    data = open(path, "rb").read()
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    try:
        through_pipe = load_model(str(fifo))
    finally:
        writer.join()
    assert through_pipe.proto.SerializeToString() == load_model(path).proto.SerializeToString()
    with pytest.raises(ModelLoadError, match=r"^/dev/null: file is empty$"):
        load_model("/dev/null")


def test_a_file_that_cannot_be_read_is_one_error(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match=r"^/proc/self/mem: cannot read it \(Input/output error\)$"):
        load_model("/proc/self/mem")  # a file whose read fails, even for root
    if os.geteuid() != 0:
        locked = tmp_path / "locked.onnx"
        locked.write_bytes(relu_model().SerializeToString())
        os.chmod(locked, 0)
        with pytest.raises(ModelLoadError, match=r"locked\.onnx: cannot read it \(Permission denied\)$"):
            load_model(str(locked))


def big_weight_model(short_by: int = 0) -> onnx.ModelProto:
    """A MatMul with a 256 KiB inline weight: as many bytes per graph entry as loading reads the
    weights' lengths from the file for; ``short_by`` bytes cut from the weight's raw data."""
    w = const("w", np.arange(256 * 256, dtype=np.float32).reshape(256, 256))
    if short_by:
        w.raw_data = w.raw_data[:-short_by]
    return model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", ["N", 256])],
                 [vi("y", ["N", 256])], [w])


def test_weights_lengths_read_from_a_file_check_as_the_parsed_message(tmp_path) -> None:
    """Inline weights must hold as many bytes as their dims and dtype need. A file's lengths are
    read from its bytes, a ModelProto's from the message: the same error either way."""
    for short_by in (4, 1):
        bad = big_weight_model(short_by)
        path = tmp_path / "short.onnx"
        path.write_bytes(bad.SerializeToString())
        assert _parse(path.read_bytes(), "short.onnx")[1] == [256 * 256 * 4 - short_by]  # read from the bytes
        errors = []
        for source in (str(path), bad, bad.SerializeToString()):
            with pytest.raises(InvalidModelError) as caught:
                load_model(source)
            errors.append(str(caught.value).split(": ", 1)[1])
        assert errors[0] == errors[1] == errors[2], errors
        assert errors[0] == ("invalid ONNX model: TensorProto (tensor name: w) raw_data size "
                             f"({256 * 256 * 4 - short_by} bytes) does not match its shape and type "
                             "(262144 bytes required)")
    good = big_weight_model()
    path.write_bytes(good.SerializeToString())
    assert load_model(str(path)).proto.SerializeToString() == load_model(good).proto.SerializeToString()


def test_lengths_given_for_another_graph_are_not_trusted() -> None:
    """check_model measures the weights itself when the lengths given do not fit the graph."""
    bad = big_weight_model(4)
    with pytest.raises(InvalidModelError, match=r"raw_data size \(262140 bytes\)"):
        check_model(bad, where="m", raw_lengths=[262144, 7])
    with pytest.raises(InvalidModelError, match=r"raw_data size \(262140 bytes\)"):
        check_model(bad, where="m", raw_lengths=[None])


def test_external_data_loaded_and_missing_reported(tmp_path) -> None:
    w = const("w", np.arange(64 * 4, dtype=np.float32).reshape(4, 64))
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", ["N", 4])], [vi("y", ["N", 64])], [w])
    path = tmp_path / "ext.onnx"
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin",
              size_threshold=0)
    loaded = load_model(str(path))  # (small tensors are read in; big ones stay external, see test_weights)
    got = onnx.numpy_helper.to_array(loaded.proto.graph.initializer[0])
    assert got.shape == (4, 64) and got[3, 63] == 4 * 64 - 1
    os.remove(tmp_path / "ext.bin")
    with pytest.raises(ModelLoadError, match=r"external data file 'ext\.bin' of tensor 'w' not found"):
        load_model(str(path))


def test_cycle_names_nodes() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Relu", ["a"], ["y"], name="out")]
    with pytest.raises(InvalidModelError, match=r"cycle through nodes 0 'first' \(Add\), 1 'second' \(Relu\)"):
        load_model(model(nodes, [vi("x", [4])], [vi("y", [4])]))


def test_duplicate_tensor_names() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="a"), helper.make_node("Sigmoid", ["x"], ["t"], name="b"),
             helper.make_node("Relu", ["t"], ["y"], name="c")]
    with pytest.raises(InvalidModelError, match=r"tensor 't' is produced twice, by node 0 'a' \(Relu\) and node 1 'b'"):
        load_model(model(nodes, [vi("x", [4])], [vi("y", [4])]))


def test_empty_graph() -> None:
    with pytest.raises(InvalidModelError, match="the graph has no nodes"):
        load_model(model([], [vi("x", [4])], [vi("x", [4])]))


def test_undefined_input() -> None:
    with pytest.raises(InvalidModelError, match=r"node 0 'r' \(Relu\) reads tensor 'ghost'"):
        load_model(model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [vi("x", [4])], [vi("y", [4])]))


def test_checker_failure_is_ours() -> None:
    bad = model([helper.make_node("Relu", ["x", "x"], ["y"], name="r")], [vi("x", [4])], [vi("y", [4])])
    with pytest.raises(InvalidModelError, match="invalid ONNX model"):
        load_model(bad)


def test_wrong_source_type() -> None:
    with pytest.raises(TrtBackendError, match="cannot load a model from int"):
        load_model(42)  # type: ignore[arg-type]


def test_unnamed_and_duplicate_node_names_become_unique_and_stable() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="dup"),
             helper.make_node("Relu", ["b"], ["y"], name="dup")]
    m = load_model(model(nodes, [vi("x", [4])], [vi("y", [4])]))
    assert [n.name for n in m.proto.graph.node] == ["Relu_0", "dup", "Relu_2"]
    assert "named 2 unnamed or duplicate-named node(s)" in m.fixes


def test_ir_version_raised_to_fit_opset() -> None:
    m = load_model(relu_model(opset=13, ir=3))  # opset 13 needs IR 7
    assert m.proto.ir_version == 7
    assert any("IR version 3 changed to 7" in f for f in m.fixes)


@pytest.mark.parametrize("listed", [True, False])
def test_an_ir_3_model_whose_weights_are_no_inputs_once_loaded_is_raised_to_ir_4(listed, tmp_path) -> None:
    """IR 3 required every initializer to be a graph input (IR 4 lifted it). An IR 3 model at an
    opset IR 3 carries (7, 8) lists its weights as inputs, which loading takes as constants; or it
    does not list them at all, as ONNX Runtime's own sample ``datasets/mul_1.onnx`` does (ONNX
    Runtime loads both). Either way ONNX's checker refused the model loaded ("w in initializer but
    not in graph input"): its IR version is raised to 4 now, and it runs as ONNX Runtime runs the
    file."""
    w = const("w", np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32))
    inputs = [vi("x", [1, 3, 8, 8])] + ([vi("w", [4, 3, 3, 3])] if listed else [])
    proto = model([helper.make_node("Conv", ["x", "w"], ["y"])], inputs, [vi("y", [1, 4, 6, 6])], [w], opset=7)
    proto.ir_version = 3
    path = str(tmp_path / "old.onnx")
    onnx.save(proto, path)
    m = load_model(path)
    assert m.proto.ir_version == 4 and FIX_IR_VERSION in m.fix_kinds
    assert any("IR version 3 changed to 4" in f and "initializers that are no graph inputs" in f for f in m.fixes)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(m.proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    kept = model([helper.make_node("Conv", ["x", "w"], ["y"])], [vi("x", [1, 3, 8, 8]), vi("w", [4, 3, 3, 3])],
                 [vi("y", [1, 4, 6, 6])], [w], opset=7)
    kept.ir_version = 3
    assert load_model(kept, max_ir_version=3).proto.ir_version == 4  # (where the file needs it)


def test_ir_version_lowered_to_the_cap_passed_in() -> None:
    """The partitioner has no runtime of its own: the caller passes the highest IR version its
    runtime accepts (trt_backend: the installed ONNX Runtime's), else the onnx package's applies."""
    too_new = relu_model(opset=13, ir=onnx.IR_VERSION + 5)
    assert load_model(too_new).proto.ir_version == onnx.IR_VERSION
    m = load_model(relu_model(opset=13, ir=onnx.IR_VERSION + 5), max_ir_version=8)
    assert m.proto.ir_version == 8 and m.max_ir_version == 8
    assert any("changed to 8" in f for f in m.fixes)
    assert load_model(relu_model(opset=13, ir=9), max_ir_version=7).proto.ir_version == 7  # opset 13 needs IR 7
    assert load_model(relu_model(opset=13, ir=9), max_ir_version=6).proto.ir_version == 7  # never below the opset


def test_unknown_rank_and_unknown_dims_accepted() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)  # no shape field at all
    m = model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], [x],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(onnx.checker.ValidationError):  # the checker alone would reject it
        onnx.checker.check_model(m)
    ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])  # ORT loads it
    loaded = load_model(m)
    assert loaded.index.types["t"].tensor_type.elem_type == TensorProto.FLOAT
    check_model(loaded.proto, where="test", full=True)


def test_shape_inference_keeps_symbolic_dims() -> None:
    w = const("w", np.ones((4, 8), np.float32))
    m = load_model(model([helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                         [vi("x", ["batch", 4])], [vi("y", None)], [w]))
    dims = [d.dim_param or d.dim_value for d in m.index.types["t"].tensor_type.shape.dim]
    assert dims == ["batch", 8]
    out_dims = [d.dim_param or d.dim_value for d in m.proto.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == ["batch", 8]


def test_initializers_listed_as_inputs_become_constants(light_dir) -> None:
    m = load_model(os.path.join(light_dir, "light_resnet50.onnx"))
    assert [i.name for i in m.proto.graph.input] == ["gpu_0/data_0"]
    assert any("taken as constant" in f for f in m.fixes)


class _HugeModel:
    """Stands in for a ModelProto past 2 GiB: protobuf refuses to serialize it."""

    def SerializeToString(self, deterministic: bool = False) -> bytes:
        raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB: 2147483712")


def test_models_past_two_gib_are_a_clear_error_not_a_crash() -> None:
    from partitioner import ModelTooLargeError
    from partitioner.model import serialize

    with pytest.raises(ModelTooLargeError,
                       match=r"segment 3 is larger than the 2 GiB .* keep the weights in external data"):
        serialize(_HugeModel(), "segment 3")  # type: ignore[arg-type]
    assert serialize(relu_model(), "small") == relu_model().SerializeToString()


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.graph.input[0].type.tensor_type.__setattr__("elem_type", 99),
     "graph input 'x' declares elem_type 99, which is not an ONNX data type"),
    (lambda m: m.graph.output[0].type.tensor_type.__setattr__("elem_type", 77),
     "graph output 'y' declares elem_type 77"),
    (lambda m: m.graph.input[0].type.tensor_type.__setattr__("elem_type", 0),
     r"graph input 'x' declares no data type \(elem_type 0, UNDEFINED\)"),
    (lambda m: m.graph.output[0].type.tensor_type.__setattr__("elem_type", 0),
     "graph output 'y' declares no data type"),
    (lambda m: m.graph.value_info.append(vi("y", [4], 99)), "value_info of 'y' declares elem_type 99"),
    (lambda m: m.graph.input[0].type.tensor_type.shape.CopyFrom(vi("x", [2**40, "n", 2**40]).type.tensor_type.shape),
     r"graph input 'x' declares shape \[1099511627776, 'n', 1099511627776\], whose element count passes int64"),
    (lambda m: m.graph.input[0].type.tensor_type.shape.CopyFrom(vi("x", [3, 2**62]).type.tensor_type.shape),
     r"graph input 'x' declares shape \[3, 4611686018427387904\], whose element count passes int64"),
])
def test_declared_types_are_checked_at_load(edit, message) -> None:
    """Each is one InvalidModelError naming the tensor (the checker lets all of them through)."""
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [4])], [vi("y", [4])])
    edit(m)
    with pytest.raises(InvalidModelError, match=message):
        load_model(m)


def test_a_shape_at_the_int64_limit_loads() -> None:
    """Only a product past int64 is refused: 2^62 x 1 is a (useless but valid) declaration. A
    zero dim is an unknown one (see the next test), so it does not hide a product past int64."""
    shape = [2**62, 1]
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", shape)], [vi("y", shape)])
    assert [d.dim_value for d in load_model(m).proto.graph.input[0].type.tensor_type.shape.dim] == shape
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2**40, 2**40, 0])], [vi("y", None)])
    with pytest.raises(InvalidModelError, match="whose element count passes int64"):
        load_model(m)


def test_minus_one_and_zero_dims_are_unknown_dims_with_one_warning(caplog) -> None:
    """Paddle2ONNX and older tf2onnx declare a dynamic batch as -1, other exporters as 0; ONNX
    Runtime runs such a model at any batch. Each such dim becomes an unknown dim (inputs, outputs,
    value_info, subgraphs; a 0 in value_info is left to shape inference, as it can be a real empty
    tensor), said in one warning, and shape inference then keeps the batch dynamic downstream
    instead of computing with -1 or 0."""
    w = const("w", np.ones((4, 3, 3, 3), np.float32))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    m = model(nodes, [vi("x", [-1, 3, -1, 0])], [vi("y", [-1, 4])], [w])
    m.graph.value_info.append(vi("c", [0, 4, -1, -1]))
    with caplog.at_level("WARNING", logger="partitioner.model"):
        loaded = load_model(m)
    # (c's 0 is inside the graph: kept there, where it yields to what the ops compute, below)
    assert caplog.text.count("taken as unknown dims") == 1 and "6 dim(s) declared as -1, 0 or '?'" in caplog.text

    def dims(tp):
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tp.tensor_type.shape.dim]

    assert dims(loaded.proto.graph.input[0].type) == [None, 3, None, None]
    assert dims(loaded.index.types["c"])[1] == 4 and dims(loaded.index.types["c"])[0] != 0
    assert dims(loaded.proto.graph.output[0].type)[1] == 4
    assert not loaded.proto.graph.output[0].type.tensor_type.shape.dim[0].dim_value
    sess = ort.InferenceSession(loaded.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((1, 3, 8, 8), (5, 3, 16, 40)):
        assert sess.run(None, {"x": np.ones(shape, np.float32)})[0].shape == (shape[0], 4)


def test_value_info_that_contradicts_the_graph_yields_to_what_the_ops_compute() -> None:
    """An exporter's value_info that contradicts the graph (a static dim where the batch is
    dynamic, a wrong rank, one name declared twice) does not reach the model's types: shape
    inference runs without it. A declared output shape the ops contradict yields too (a fix
    says so); a declaration for a tensor inference cannot type is kept, recorded as declared."""
    from partitioner.model import DECLARED

    nodes = [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["u"]),
             helper.make_node("Mystery", ["u"], ["m"], domain="com.example"), helper.make_node("Abs", ["m"], ["y"])]
    m = model(nodes, [vi("x", ["N", 3])], [vi("y", None), vi("u", [5, 3])], extra_opsets=[("com.example", 1)])
    m.graph.value_info.extend([vi("t", [5, 3]), vi("t", [2, 3, 1]), vi("m", ["N", 7])])
    loaded = load_model(m)
    t = loaded.index.types["t"].tensor_type
    assert len(t.shape.dim) == 2 and t.shape.dim[0].dim_param == "N" and t.shape.dim[1].dim_value == 3
    u = loaded.proto.graph.output[1].type.tensor_type
    assert [d.dim_param or d.dim_value for d in u.shape.dim] == ["N", 3]
    assert any("graph output 'u' declared as [5, 3], computed as [N, 3]" in f for f in loaded.fixes)
    assert loaded.learned == {"m": DECLARED}  # typed by its declaration alone; y follows from it
    assert [d.dim_param or d.dim_value for d in loaded.index.types["y"].tensor_type.shape.dim] == ["N", 7]


def test_a_contradicted_output_shape_is_a_fix_the_parser_does_not_see() -> None:
    """TensorRT's parser reads a graph output's name and element type, not its shape: a declared
    shape the ops contradict is fixed as a kind the parser is blind to (so the file can be handed
    to it as it is). A declared element type stays as declared (shape inference keeps it)."""
    from partitioner.model import FIX_OUTPUT_SHAPES, PARSER_NEUTRAL_FIXES

    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    shape = load_model(model(nodes, [vi("x", ["N", 3])], [vi("y", [1, 5])]))
    assert shape.fix_kinds == {FIX_OUTPUT_SHAPES} and shape.fix_kinds <= PARSER_NEUTRAL_FIXES
    dtype = load_model(model(nodes, [vi("x", ["N", 3])], [vi("y", ["N", 3], TensorProto.INT64)]))
    assert dtype.proto.graph.output[0].type.tensor_type.elem_type == TensorProto.INT64 and not dtype.fix_kinds


def test_a_graph_output_declared_in_value_info_too_is_typed_by_inference() -> None:
    """Paddle2ONNX declares a graph output in value_info as well as on the output. Inference types
    a graph output on the output, so it is typed by what the ops compute, not recorded as typed by
    the declaration alone (which made loading run the whole model in ONNX Runtime to check it)."""
    from trt_backend.planning import load_normalized

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["y"])]
    m = model(nodes, [vi("x", ["N", 3, "H", "W"])], [vi("y", ["d0", "d1", "d2", "d3"])],
              [const("w", np.ones((2, 3, 1, 1), np.float32))], opset=11)
    m.graph.value_info.extend([vi("y", ["d0", "d1", "d2", "d3"])])
    loaded = load_normalized(m)
    assert loaded.learned == {}
    assert [d.dim_param or d.dim_value for d in loaded.proto.graph.output[0].type.tensor_type.shape.dim] == \
        ["N", 2, "d2", "d3"]  # (computed, then declared where a Conv's dims are not computed)


def _if_model(then_output_type: int) -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", [4], then_output_type)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", [4])])
    return model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)],
                 [vi("c", [], TensorProto.BOOL), vi("x", [4])], [vi("y", [4])])


def test_subgraphs_declared_types_are_checked_at_load() -> None:
    """An If branch whose output declares elem_type 99 was a ValueError traceback out of ONNX shape
    inference (found by benchmarks/conformance/fuzz.py); now one error naming the node, branch and tensor."""
    with pytest.raises(InvalidModelError, match=r"node 'branch' \(If\) then_branch: graph output 't' declares "
                                                r"elem_type 99, which is not an ONNX data type"):
        load_model(_if_model(99))
    assert load_model(_if_model(TensorProto.FLOAT)).index.types["y"].tensor_type.elem_type == TensorProto.FLOAT


def test_shape_inference_failing_with_a_value_error_is_not_fatal(caplog) -> None:
    """ONNX shape inference raises ValueError on some malformed types; inference is a hint, so
    the load goes on without it (a warning says so) instead of ending in a traceback."""
    from partitioner.model import _infer_shapes

    m = _if_model(99)
    with pytest.raises(ValueError):
        onnx.shape_inference.infer_shapes(m)
    _infer_shapes(m, "m.onnx")
    assert "m.onnx: shape inference failed, continuing without it: Invalid tensor data type 99" in caplog.text


@pytest.mark.parametrize("inputs, kind", [
    ([[-1, 3, "?", "w"]], FIX_UNKNOWN_DIMS),  # (Paddle2ONNX's recognisers: one "?", the parser's -1 alike)
    ([[-1, 3, 8, 8], [-1, 3, 8, 8]], FIX_UNKNOWN_DIMS),
    ([["?", 3, "?", "?"]], FIX_INPUT_DIMS),  # (the parser holds dims of one name equal)
    ([["?", 3, 8, 8], ["?", 3, 8, 8]], FIX_INPUT_DIMS),
    ([[0, 3, 8, 8]], FIX_INPUT_DIMS),  # (the parser reads 0 as an empty dim)
])
def test_unknown_dims_are_parser_neutral_where_tensorrt_reads_them_as_dynamic_too(inputs, kind) -> None:
    """TensorRT's parser reads the declared dims of the main graph's inputs only, -1 as dynamic, 0
    as empty, and a name as dynamic and equal to every input dim of that name. Taking -1, 0 or "?"
    as unknown leaves the model as the parser reads its file (a build may hand it the file) unless
    an input had a 0 or a "?" on two dims; -1, 0 and "?" in outputs never matter to it."""
    names = [f"x{k}" for k in range(len(inputs))]
    nodes = [helper.make_node("Relu", [n], [f"r{k}"]) for k, n in enumerate(names)]
    outs = [vi(f"r{k}", ["?", 0, -1, "?"]) for k in range(len(names))]
    loaded = load_model(model(nodes, [vi(n, dims) for n, dims in zip(names, inputs)], outs))
    assert loaded.fix_kinds == {kind, FIX_NODE_NAMES}
    assert (kind in PARSER_NEUTRAL_FIXES) == (kind == FIX_UNKNOWN_DIMS)
    declared = [[d.dim_value or d.dim_param or None for d in v.type.tensor_type.shape.dim]
                for v in loaded.proto.graph.input]
    assert declared == [[None if d in ("?", 0, -1) else d for d in dims] for dims in inputs]


def test_tensors_of_unknown_data_type_are_one_error_naming_them() -> None:
    """An initializer of data_type 99 reached the Resize plugin's constant read as ``KeyError: 99``
    (found by benchmarks/conformance/fuzz.py); initializers and tensor attributes, in subgraphs too, are
    checked at load."""
    bad = const("c", np.ones(4, np.float32))
    bad.data_type = 99
    m = model([helper.make_node("Add", ["x", "c"], ["y"])], [vi("x", [4])], [vi("y", [4])], [bad])
    with pytest.raises(InvalidModelError, match=r"initializer 'c' has data_type 99, which is not an ONNX data type"):
        load_model(m)
    value = helper.make_tensor("v", TensorProto.FLOAT, [4], [1.0] * 4)
    value.data_type = 77
    then = helper.make_graph([helper.make_node("Constant", [], ["t"], name="k", value=value)], "then", [],
                             [vi("t", [4])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", [4])])
    m = model([helper.make_node("If", ["b"], ["y"], name="branch", then_branch=then, else_branch=other)],
              [vi("b", [], TensorProto.BOOL), vi("x", [4])], [vi("y", [4])])
    with pytest.raises(InvalidModelError, match=r"node 'branch' \(If\) then_branch: node 'k' \(Constant\) attribute "
                                                r"'value' has data_type 77"):
        load_model(m)


@pytest.mark.parametrize("dims, nbytes", [([1], 4_000_000), ([1000, 1000], 4), ([2], 12)])
def test_raw_weights_of_another_length_than_their_dims_need_are_refused(dims, nbytes) -> None:
    """Sizes of inline weights are read from dims and dtype after loading (the bytes are not
    copied to be counted), so loading checks every one: too many bytes, too few, large or small."""
    w = onnx.TensorProto()
    w.name, w.data_type, w.raw_data = "w", onnx.TensorProto.FLOAT, b"\0" * nbytes
    w.dims.extend(dims)
    graph = onnx.helper.make_graph([onnx.helper.make_node("Add", ["x", "w"], ["y"])], "g",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, dims)],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, dims)], [w])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    need = 4 * int(np.prod(dims))
    with pytest.raises(InvalidModelError, match=rf"tensor name: w\) raw_data size \({nbytes} bytes\) does not match "
                                                rf"its shape and type \({need} bytes required\)"):
        load_model(model)



NOT_UTF8 = (r"<bytes>: invalid ONNX model: a name or string in it is not valid UTF-8: "
            r"graph.node\[1\].attribute\[0\].name is b'kEepD\\xe9ms'$")


def test_a_name_that_is_not_utf8_is_one_clear_error() -> None:
    """ONNX's checker cannot format its message about such a model (found by
    ``benchmarks/conformance/fuzz.py --seed 5``, mutant 162: bit flips in a model with subgraphs): one
    InvalidModelError naming the field, instead of a traceback."""
    from tests.support.mutants import make_mutant, seed_models

    mutant = make_mutant(seed_models(), 162, 5)
    with pytest.raises(InvalidModelError, match=NOT_UTF8):
        load_model(mutant.files["model.onnx"])



def test_a_node_name_that_is_not_utf8_is_refused_at_load_where_the_checker_takes_it() -> None:
    """ONNX's checker passes a node named in bytes that are not UTF-8 (``fuzz.py --seed 27``, mutant
    110: bit flips in the demo model); a build then failed recording it in its manifest (a
    traceback). Loading names the field, in the main graph and in a subgraph."""
    from tests.support.mutants import make_mutant, seed_models

    said = r"<bytes>: invalid ONNX model: a name or string in it is not valid UTF-8: "
    mutant = make_mutant(seed_models(), 110, 27)
    with pytest.raises(InvalidModelError, match=said + r"graph\.node\[1\]\.name is b'rel\\xf51'"):
        load_model(mutant.files["model.onnx"])
    body = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="inner")], "body", [], [vi("t", ["N", 4])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)],
              [vi("c", [], TensorProto.BOOL), vi("x", ["N", 4])], [vi("y", ["N", 4])])
    data = m.SerializeToString().replace(b"inner", b"in\xf5er")
    with pytest.raises(InvalidModelError, match=said + r"graph\.node\[0\]\.attribute\[\d\]\.g\.node\[0\]\.name"):
        load_model(data)

def _empty_checker_error(*args, **kwargs):
    raise onnx.checker.ValidationError("")


def test_the_checker_saying_nothing_about_a_name_not_utf8_is_our_message(monkeypatch) -> None:
    """Some ONNX builds raise a ValidationError with an empty message where others raise a
    UnicodeDecodeError for the same model: either way the error names the field."""
    from tests.support.mutants import make_mutant, seed_models

    monkeypatch.setattr(onnx.checker, "check_model", _empty_checker_error)
    mutant = make_mutant(seed_models(), 162, 5)
    with pytest.raises(InvalidModelError, match=NOT_UTF8):
        load_model(mutant.files["model.onnx"])


def test_the_checker_saying_nothing_about_a_bad_node_names_the_node(monkeypatch) -> None:
    monkeypatch.setattr(onnx.checker, "check_model", _empty_checker_error)
    bad = model([helper.make_node("Relu", ["x", "x"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2])])
    # the checker's own words about the node are ONNX's, and may change between releases
    with pytest.raises(InvalidModelError, match=r"^<bytes>: invalid ONNX model: node 0 'r' \(Relu\): \S"):
        load_model(bad.SerializeToString())


def test_shape_inference_saying_nothing_says_what_ran_and_which_onnx(monkeypatch) -> None:
    def empty(*args, **kwargs):
        raise onnx.shape_inference.InferenceError("InferenceError")

    good = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2])])
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", empty)
    with pytest.raises(InvalidModelError) as raised:
        check_model(good, where="m.onnx", full=True)
    assert str(raised.value) == (f"m.onnx: invalid ONNX model: ONNX's shape inference (onnx {onnx.__version__}) "
                                 "rejected it with InferenceError and no message; no name, string or single node "
                                 "of the main graph is at fault on its own")


def test_a_real_empty_tensor_in_value_info_is_kept_without_a_warning(caplog) -> None:
    """Shape inference writes a Slice to nothing as [2, 0]; a model saved with it (a build
    folder's model.onnx, or a user's after onnx.shape_inference) was warned about on every load
    ("declared as -1, 0 or '?'") and its empty dim made unknown."""
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["empty"]),
             helper.make_node("Concat", ["x", "empty"], ["c"], axis=1), helper.make_node("Relu", ["c"], ["y"])]
    m = model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8])],
              [const("s", np.array([8], np.int64)), const("e", np.array([8], np.int64)),
               const("a", np.array([1], np.int64))])
    inferred = onnx.shape_inference.infer_shapes(m)
    assert any(v.name == "empty" for v in inferred.graph.value_info)
    with caplog.at_level("WARNING", logger="partitioner.model"):
        loaded = load_model(inferred)
    assert "taken as unknown" not in caplog.text
    assert [d.dim_value for d in loaded.index.types["empty"].tensor_type.shape.dim] == [2, 0]


def test_a_0_dim_declared_for_a_tensor_inference_cannot_type_stays_unknown() -> None:
    """A custom op's output declared [0, 4] in value_info: shape inference cannot type it, so the
    declaration is taken on faith, and its 0 (an exporter's "dynamic") must not become a fixed
    empty dim that spreads downstream."""
    nodes = [helper.make_node("Foo", ["x"], ["t"], domain="com.example"), helper.make_node("Relu", ["t"], ["u"]),
             helper.make_node("Concat", ["x", "u"], ["y"], axis=1)]
    m = model(nodes, [vi("x", ["B", 4])], [vi("y", None)])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    m.graph.value_info.append(vi("t", [0, 4]))
    loaded = load_model(m)

    def dims(name):
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in loaded.index.types[name].tensor_type.shape.dim]

    assert dims("t")[1] == 4 and dims("t")[0] != 0 and dims("u")[0] != 0 and dims("y")[0] != 0, (dims("t"), dims("y"))
