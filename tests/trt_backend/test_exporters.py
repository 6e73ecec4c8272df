"""Models as exporters write them, on small models that reproduce what trained models from
Paddle2ONNX and older tf2onnx do: a batch dim declared as -1 plans, builds (TensorRT-RTX) and runs
emulated equal to ONNX Runtime; a text recognizer whose reshape shape is computed at run time
(shape inference cannot type what follows) gets its types from probe runs at the profiles' shapes,
so no static dim in a segment is false at a profile's min, opt or max (probed at dims of 2 and 3,
width / 8 was a static 1, and ONNX Runtime failed re-using a buffer planned from it)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.support.graphs import assert_same, ort_reference
from trt_backend.artifacts.write import build as build_folder
from trt_backend.ort.probe import HOW
from trt_backend.planning import load_normalized
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

C = 32


def _w(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.2) -> onnx.TensorProto:
    return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def paddle_classifier() -> onnx.ModelProto:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax, input [-1, 3, -1, -1] and
    output [-1, 4], as Paddle2ONNX writes a dynamic classifier."""
    rng = np.random.default_rng(0)
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
             h.make_node("Flatten", ["g"], ["f"], name="flatten"),
             h.make_node("Gemm", ["f", "fw", "fb"], ["logits"], name="fc"),
             h.make_node("Softmax", ["logits"], ["prob"], axis=1, name="softmax")]
    inits = [_w(rng, "w", (8, 3, 3, 3)), _w(rng, "b", (8,)), _w(rng, "fw", (8, 4)), _w(rng, "fb", (4,))]
    graph = h.make_graph(nodes, "paddle", [h.make_tensor_value_info("x", T.FLOAT, [-1, 3, -1, -1])],
                         [h.make_tensor_value_info("prob", T.FLOAT, [-1, 4])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)], producer_name="PaddlePaddle")
    m.ir_version = 6
    return m


def test_a_minus_one_batch_plans_builds_and_runs(tmp_path, flavor) -> None:
    m = paddle_classifier()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])  # ONNX Runtime runs it
    profiles = [{"x": ((1, 3, 16, 16), (2, 3, 32, 32), (4, 3, 64, 64))}]
    ours = Session(m, profiles, SessionOptions(emulate=True))
    assert [s.backend for s in ours.plan.segments] == ["tensorrt"]
    rng = np.random.default_rng(1)
    for shape in ((1, 3, 16, 16), (3, 3, 40, 24), (4, 3, 64, 64)):
        feeds = {"x": rng.random(shape, dtype=np.float32)}
        assert_same(ours.run(None, feeds), sess.run(None, feeds))
    manifest = build_folder(m, str(tmp_path / "b"), profiles, SessionOptions())
    assert [s["engine_bytes"] > 0 for s in manifest["segments"]] == [True]


def test_dims_named_question_mark_are_unknown_so_height_and_width_may_differ(tmp_path) -> None:
    """Paddle2ONNX names every dynamic dim "?": [-1, 3, "?", "?"]. A shared name says the dims are
    equal, which TensorRT holds a model to: built as declared, a 48x192 profile failed ("Input
    dimensions with this name have different constant values") and bisection blamed the first
    Conv. Taken as unknown dims, the classifier is one engine at any height and width."""
    m = paddle_classifier()
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param = "?"
    dims[3].dim_param = "?"
    profiles = [{"x": ((1, 3, 48, 192), (2, 3, 48, 192), (4, 3, 48, 192))}]
    manifest = build_folder(m, str(tmp_path / "b"), profiles, SessionOptions())
    assert [s["backend"] for s in manifest["segments"]] == ["tensorrt"] and not manifest["demoted"]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"x": np.random.default_rng(2).random((3, 3, 48, 192), dtype=np.float32)}
    assert_same(Session.load(str(tmp_path / "b")).run(None, feeds), ref.run(None, feeds))


def recognizer_tail() -> onnx.ModelProto:
    """A text recognizer's tail as Paddle2ONNX writes it: a stem and a pool bring the height to 1
    (width / 4), a Reshape whose shape is computed at run time (through a Tile, so shape
    inference knows neither its rank nor anything after it), a squeeze-and-excitation gate
    ([1, C, 1, 1], which dies where the gated features are made), Conv/BN/swish blocks, a Concat
    with the pooled features, and a Squeeze of the height."""
    rng = np.random.default_rng(0)

    def const(name: str, value: object) -> onnx.TensorProto:
        return nh.from_array(np.asarray(value), name)

    inits = [_w(rng, "stem_w", (C, 3, 3, 3)), _w(rng, "se_w", (C, C, 1, 1)), _w(rng, "a_w", (C, C, 1, 1)),
             _w(rng, "b_w", (C, 2 * C, 1, 3)), const("one", np.array([1], np.int64)),
             const("minus1", np.array([-1], np.int64)), const("channels", np.array([C], np.int64)),
             const("zero", np.array([0], np.int64)), const("two", np.array([2], np.int64))]
    nodes = [h.make_node("Conv", ["x", "stem_w"], ["f"], pads=[1, 1, 1, 1], strides=[2, 2], name="stem"),
             h.make_node("AveragePool", ["f"], ["pool"], kernel_shape=[8, 2], strides=[8, 2], name="pool"),
             h.make_node("Shape", ["pool"], ["pshape"], name="shape"),
             h.make_node("Gather", ["pshape", "zero"], ["batch"], axis=0, name="batch"),
             h.make_node("Concat", ["one", "minus1", "channels"], ["tail"], axis=0, name="tail"),
             h.make_node("Div", ["batch", "batch"], ["reps"], name="reps"),  # 1, known at run time only
             h.make_node("Tile", ["tail", "reps"], ["tiled"], name="tile"),
             h.make_node("Concat", ["batch", "tiled"], ["newshape"], axis=0, name="newshape"),
             h.make_node("Transpose", ["pool"], ["nhwc"], perm=[0, 2, 3, 1], name="to_nhwc"),
             h.make_node("Reshape", ["nhwc", "newshape"], ["seq"], name="reshape"),
             h.make_node("Transpose", ["seq"], ["back"], perm=[0, 3, 1, 2], name="to_nchw"),
             h.make_node("GlobalAveragePool", ["back"], ["gap"], name="se_pool"),
             h.make_node("Conv", ["gap", "se_w"], ["se_c"], name="se_conv"),
             h.make_node("Sigmoid", ["se_c"], ["gate"], name="se_gate"),
             h.make_node("Mul", ["back", "gate"], ["gated"], name="se_mul")]
    prev = "gated"
    for k, (kernel, pads) in enumerate((([1, 1], [0, 0, 0, 0]), ([1, 3], [0, 1, 0, 1]))):
        inits += [_w(rng, f"bn{k}_s", (C,), 0.1), _w(rng, f"bn{k}_b", (C,), 0.1), _w(rng, f"bn{k}_m", (C,), 0.1),
                  const(f"bn{k}_v", np.ones(C, np.float32))]
        if k:
            nodes.append(h.make_node("Concat", ["pool", prev], ["cat"], axis=1, name="concat"))
            prev = "cat"
        weight = "a_w" if k == 0 else "b_w"
        nodes += [h.make_node("Conv", [prev, weight], [f"conv{k}"], kernel_shape=kernel, pads=pads, name=f"conv{k}"),
                  h.make_node("BatchNormalization", [f"conv{k}", f"bn{k}_s", f"bn{k}_b", f"bn{k}_m", f"bn{k}_v"],
                              [f"bn{k}"], name=f"bn{k}"),
                  h.make_node("Sigmoid", [f"bn{k}"], [f"sig{k}"], name=f"sig{k}"),
                  h.make_node("Mul", [f"bn{k}", f"sig{k}"], [f"swish{k}"], name=f"swish{k}")]
        prev = f"swish{k}"
    nodes.append(h.make_node("Squeeze", [prev, "two"], ["y"], name="squeeze"))
    graph = h.make_graph(nodes, "rec", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, "W"])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, C, "Wo"])], inits)
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


WIDTHS = (16, 160, 320)
REC_PROFILES = [{"x": tuple((1, 3, 16, w) for w in WIDTHS)}]


def _dims(tp: onnx.TypeProto) -> list[int | None]:
    return [d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim]


def test_probe_learns_types_at_the_profiles_shapes() -> None:
    """At dims of 2 and 3 the width after the reshape is 1 in both runs: a static 1 that is false
    at width 160. At the profiles' shapes it is a dynamic dim; the channels stay static."""
    m = recognizer_tail()
    small = load_normalized(m)
    assert small.learned["back"] == HOW and _dims(small.index.types["back"]) == [1, C, 1, 1]  # (the trap)
    model = load_normalized(m, [{"x": s} for s in REC_PROFILES[0]["x"]])
    assert model.learned["back"] == HOW and _dims(model.index.types["back"]) == [1, C, 1, None]
    assert _dims(model.index.types["swish1"]) == [1, C, 1, None]
    # a model loaded at other shapes learns its types again at these
    again = load_normalized(small, [{"x": s} for s in REC_PROFILES[0]["x"]])
    assert again is small and _dims(small.index.types["back"]) == [1, C, 1, None]


def test_no_segment_holds_a_static_dim_a_profile_shape_contradicts() -> None:
    """The recognizer runs emulated equal to ONNX Runtime at every profile width, and every
    static dim its TensorRT segment declares (inputs, outputs, value_info) holds in a real ONNX
    Runtime run at the profiles' min, opt and max."""
    m = recognizer_tail()
    sess = Session(m, REC_PROFILES, SessionOptions(emulate=True))
    trt = sess.compiled.plan.tensorrt_segments()
    assert len(trt) == 1 and len(trt[0].nodes) == len(m.graph.node)
    segment = sess.compiled.segments[trt[0].id].model
    declared = {vi.name: _dims(vi.type)
                for vi in (*segment.graph.input, *segment.graph.output, *segment.graph.value_info)
                if vi.type.tensor_type.HasField("shape")}
    names = sorted(n for n in declared if n != "x")
    rng = np.random.default_rng(2)
    checked = 0
    for width in WIDTHS:
        feeds = {"x": rng.random((1, 3, 16, width), dtype=np.float32)}
        assert_same(sess.run(None, feeds), ort_reference(m, feeds))
        for name, value in zip(names, ort_reference(m, feeds, names)):
            want = declared[name]
            assert len(want) == value.ndim, name
            assert all(d is None or d == got for d, got in zip(want, value.shape)), (name, want, value.shape)
            checked += 1
    assert checked >= 3 * 20


def test_a_model_with_no_tensorrt_segment_builds_a_folder(tmp_path, flavor) -> None:
    """A model all of whose nodes run on ONNX Runtime (as a dynamically quantized one, of
    ConvInteger and DynamicQuantizeLinear, does) still makes a build folder that runs."""
    m = paddle_classifier()
    ops = tuple(sorted({n.op_type for n in m.graph.node}))
    manifest = build_folder(m, str(tmp_path / "b"), None, SessionOptions(exclude_ops=ops))
    assert [s["backend"] for s in manifest["segments"]] == ["onnxruntime"]
    sess = Session.load(str(tmp_path / "b"), SessionOptions(emulate=True))
    x = np.random.default_rng(3).random((2, 3, 20, 20), dtype=np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_same(sess.run(None, {"x": x}), ref.run(None, {"x": x}))
