"""Resize spec: attributes per opset, plugin parameters, output shapes, and the predicate's
reasons for input the plugin cannot take."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from partitioner import load_model
from plugins.resize.node import check, resolve, stand_in
from plugins.resize.spec import ResizeParams, SpecError, make_params, read_attributes
from tests.helpers import const, model, vi


def resize_model(attrs: dict[str, Any], inputs: dict[str, np.ndarray | str | None], shape: list[Any] | None = None,
                 opset: int = 19, dtype: int = TensorProto.FLOAT, out_shape: list[Any] | None = None):
    """x -> Resize -> y, roi/scales/sizes as initializers (arrays), graph inputs (strings) or absent."""
    shape = ["N", 3, 8, 8] if shape is None else shape
    names, inits, graph_inputs = ["x"], [], [vi("x", shape, dtype)]
    for role in ("roi", "scales", "sizes") if opset > 10 else ("scales",):
        value = inputs.get(role)
        if value is None:
            names.append("")
        elif isinstance(value, str):
            names.append(value)
            graph_inputs.append(vi(value, [None], TensorProto.INT64 if role == "sizes" else TensorProto.FLOAT))
        else:
            names.append(role)
            inits.append(const(role, value))
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["y"], name="rz", **attrs)
    loaded = load_model(model([node], graph_inputs, [vi("y", out_shape, dtype)], inits, opset=opset, ir=9))
    if out_shape is not None:  # (loading keeps a declared output shape only where the ops agree: one
        # that disagrees is declared again here, as a stale type would reach the predicate)
        loaded.proto.graph.output[0].CopyFrom(vi("y", out_shape, dtype))
        loaded.index.refresh_types()
    return loaded


F32 = np.float32


def test_attributes_follow_the_schema_version() -> None:
    node = helper.make_node("Resize", ["x", "s"], ["y"], mode="linear", coordinate_transformation_mode="align_corners")
    assert read_attributes(node, 10).coordinate_mode == "asymmetric"  # Resize-10 has no such attribute
    assert read_attributes(node, 10).nearest_mode == "simple"
    a13 = read_attributes(node, 13)
    assert (a13.version, a13.coordinate_mode, a13.antialias, a13.axes) == (13, "align_corners", 0, None)
    node18 = helper.make_node("Resize", ["x"], ["y"], antialias=1, axes=[-1, 2], keep_aspect_ratio_policy="not_smaller")
    a17, a18 = read_attributes(node18, 17), read_attributes(node18, 18)
    assert (a17.version, a17.antialias, a17.axes, a17.keep_aspect_ratio_policy) == (13, 0, None, "stretch")
    assert (a18.version, a18.antialias, a18.axes, a18.keep_aspect_ratio_policy) == (18, 1, (-1, 2), "not_smaller")
    assert read_attributes(node18, 21).version == 19
    with pytest.raises(SpecError, match="mode 'bilinear'"):
        read_attributes(helper.make_node("Resize", ["x"], ["y"], mode="bilinear"), 19)
    with pytest.raises(SpecError, match="nearest_mode 'round'"):
        read_attributes(helper.make_node("Resize", ["x"], ["y"], nearest_mode="round"), 19)


def test_params_expand_axes_roi_and_sizes() -> None:
    node = helper.make_node("Resize", ["x"], ["y"], mode="cubic", axes=[3, 2], cubic_coeff_a=-0.5, exclude_outside=1,
                            coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.0)
    attrs = read_attributes(node, 19)
    p = make_params(attrs, ["N", 3, 10, 20], np.array([0.1, 0.2, 0.9, 0.8], F32), None, np.array([30, 5]))
    assert p.rank == 4 and p.mode == 2 and p.ctm == 5 and p.cubic_a == -0.5 and p.exclude_outside == 1
    assert p.sizes == (-1, -1, 5, 30) and p.scales == (1.0, 1.0, 0.0, 0.0)
    assert p.roi == pytest.approx((0, 0, 0.2, 0.1, 1, 1, 0.8, 0.9))
    assert p.output_shape(["N", 3, 10, 20]) == ["N", 3, 5, 30]
    assert ResizeParams.from_attributes(p.to_attributes()) == p


def test_output_lengths_use_float32_products_like_onnx_runtime() -> None:
    attrs = read_attributes(helper.make_node("Resize", ["x"], ["y"]), 19)
    p = make_params(attrs, [1, 1, 10, 3], None, np.array([1, 1, 0.7, 0.6], F32), None)
    assert p.output_shape([1, 1, 10, 3]) == [1, 1, 7, 1]  # float32(0.7)*10 rounds to 7.0 exactly
    assert p.output_shape([2, 1, "H", 5]) == [2, 1, None, 3]


def test_keep_aspect_ratio_policy_rounds_half_away_from_zero() -> None:
    node = helper.make_node("Resize", ["x"], ["y"], axes=[2, 3], keep_aspect_ratio_policy="not_larger")
    p = make_params(read_attributes(node, 18), ["N", 3, 4, 6], None, None, np.array([6, 15]))
    assert p.output_shape(["N", 3, 4, 6]) == ["N", 3, 6, 9] and p.scales[2:] == (1.5, 1.5)
    smaller = make_params(read_attributes(helper.make_node("Resize", ["x"], ["y"], axes=[2, 3],
                                                           keep_aspect_ratio_policy="not_smaller"), 18),
                          [1, 1, 4, 6], None, None, np.array([6, 15]))
    assert smaller.output_shape([1, 1, 4, 6]) == [1, 1, 10, 15]
    with pytest.raises(SpecError, match="needs static input lengths on axes \\[2\\]"):
        make_params(read_attributes(node, 18), ["N", 3, "H", 6], None, None, np.array([6, 15]))


@pytest.mark.parametrize("attrs, inputs, kwargs, reason", [
    ({}, {"scales": np.array([1, 1, 2, 2], F32), "sizes": np.array([1, 3, 16, 16])}, {},
     "both scales and sizes are given"),
    ({}, {"scales": np.array([1, 2, 2], F32)}, {}, "scales has 3 values for 4 resized axes"),
    ({}, {}, {}, "neither scales nor sizes"),
    ({"coordinate_transformation_mode": "tf_crop_and_resize"},
     {"roi": np.array([0, 0, 1, 1], F32), "scales": np.array([1, 1, 2, 2], F32)}, {}, "roi has 4 values"),
    ({}, {"scales": np.array([1, 1, 2, 2], F32)}, {"dtype": TensorProto.UINT8}, "input dtype uint8"),
    ({}, {"scales": np.array([1, 1, 2, 2], F32)}, {"dtype": TensorProto.INT32}, "input dtype int32"),
    ({}, {"scales": "runtime_scales"}, {}, "scales 'runtime_scales' is computed at run time"),
    ({}, {"scales": np.array([1, 1, 0, 2], F32)}, {}, "must be finite and > 0"),
    ({}, {"scales": np.array([1, 1, 2, 2], F32)}, {"out_shape": ["N", 3, 16, 17]},
     "axis 3 is declared 17 but scales/sizes give 16"),
    ({}, {"scales": np.array([1, 1, 1.5, 1.5], F32)}, {"shape": ["N", 3, "H", "W"]},
     "axis 2 has a dynamic length and scale 1.5"),
    ({"axes": [2, 2]}, {"scales": np.array([2, 2], F32)}, {}, "repeat an axis"),
    ({"axes": [4]}, {"scales": np.array([2], F32)}, {}, "out of range"),
])
def test_predicate_says_no_with_a_reason(attrs, inputs, kwargs, reason) -> None:
    m = resize_model(attrs, inputs, **kwargs)
    assert reason in (check(m.proto.graph.node[0], m) or "")


def test_predicate_accepts_dynamic_lengths_with_exact_scales() -> None:
    for scales in ([1, 1, 2, 3], [1, 1, 0.5, 0.25]):
        m = resize_model({"mode": "linear"}, {"scales": np.array(scales, F32)}, shape=["N", 3, "H", "W"])
        assert check(m.proto.graph.node[0], m) is None
    m = resize_model({}, {"sizes": np.array([1, 3, 5, 7])}, shape=["N", 3, "H", "W"])
    assert check(m.proto.graph.node[0], m) is None


@pytest.mark.parametrize("opset", [10, 11, 13, 18, 19])
def test_every_opset_resolves_and_gets_a_native_stand_in(opset: int) -> None:
    attrs = {"mode": "linear"} if opset == 10 else {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}
    inputs: dict[str, np.ndarray | str | None] = {"scales": np.array([1, 1, 2, 2], F32)}
    if opset == 11:  # Resize-11 requires roi, empty when unused
        inputs["roi"] = np.zeros(0, F32)
    m = resize_model(attrs, inputs, opset=opset)
    r = resolve(m.proto.graph.node[0], m)
    assert r.version == opset and r.params.output_shape(r.in_shape) == ["N", 3, 16, 16]
    rep = stand_in(m.proto.graph.node[0], m)
    assert rep is not None and [n.op_type for n in rep.nodes] == ["Resize"]
    assert rep.nodes[0].output == m.proto.graph.node[0].output
    assert {a.name: helper.get_attribute_value(a) for a in rep.nodes[0].attribute}["mode"] == b"nearest"


def test_constant_node_inputs_count_as_constants() -> None:
    nodes = [helper.make_node("Constant", [], ["s"], value=const("v", np.array([1, 1, 2, 2], F32))),
             helper.make_node("Resize", ["x", "", "s"], ["y"], name="rz", mode="nearest")]
    m = load_model(model(nodes, [vi("x", ["N", 3, 4, 4])], [vi("y", None)], opset=13))
    assert resolve(m.proto.graph.node[1], m).params.scales == (1.0, 1.0, 2.0, 2.0)


def test_bfloat16_and_float16_inputs_are_taken() -> None:
    for dtype in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        m = resize_model({}, {"scales": np.array([1, 1, 2, 2], F32)}, dtype=dtype)
        assert check(m.proto.graph.node[0], m) is None


def test_sizes_on_dynamic_lengths_have_no_constant_stand_in() -> None:
    m = resize_model({}, {"sizes": np.array([1, 3, 5, 7])}, shape=["N", 3, "H", "W"], opset=13)
    assert stand_in(m.proto.graph.node[0], m) is None
    assert isinstance(m.proto, onnx.ModelProto)
