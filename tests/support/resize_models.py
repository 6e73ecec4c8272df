"""Small CNNs with Resize nodes that TensorRT's ONNX importer rejects, for the plugin tests and
``plugin_segments.py``. Weights are seeded; every model passes the ONNX checker."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def conv(self, x: str, name: str, cin: int, cout: int, k: int = 3, relu: bool = True) -> str:
        w = self.const(f"{name}.w", self.rng.standard_normal((cout, cin, k, k)) * (1.0 / np.sqrt(cin * k * k)))
        b = self.const(f"{name}.b", self.rng.standard_normal(cout) * 0.1)
        self.nodes.append(helper.make_node("Conv", [x, w, b], [name], name=name, pads=[k // 2] * 4))
        if not relu:
            return name
        self.nodes.append(helper.make_node("Relu", [name], [f"{name}.relu"], name=f"{name}.relu"))
        return f"{name}.relu"

    def pool(self, x: str, name: str) -> str:
        self.nodes.append(helper.make_node("MaxPool", [x], [name], name=name, kernel_shape=[2, 2], strides=[2, 2]))
        return name

    def resize(self, x: str, name: str, inputs: tuple[str, str, str] = ("", "", ""), **attrs: Any) -> str:
        self.nodes.append(helper.make_node("Resize", [x, *inputs], [name], name=name, **attrs))
        return name

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[str], opset: int) -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [None] * 4) for o in outputs]
        m = helper.make_model(helper.make_graph(self.nodes, name, inputs, outs, self.inits),
                              opset_imports=[helper.make_opsetid("", opset)], producer_name="trt-backend plugin models")
        m.ir_version = 9
        return m


def image(name: str = "x", size: int = 16) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 3, size, size])


def crop_cnn(antialias: bool = False, seed: int = 0) -> onnx.ModelProto:
    """conv-relu-conv, a tf_crop_and_resize Resize (x2 up, or x0.75 with antialias), conv-relu-conv."""
    b = _Builder(seed)
    h = b.conv(b.conv("x", "conv1", 3, 8), "conv2", 8, 8, relu=False)
    scale = 0.75 if antialias else 2.0
    roi = b.const("crop.roi", [0, 0, 0.1, 0.15, 1, 1, 0.9, 0.8])
    scales = b.const("crop.scales", [1, 1, scale, scale])
    attrs: dict[str, Any] = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                             "extrapolation_value": 0.0}
    if antialias:
        attrs["antialias"] = 1
    h = b.resize(h, "crop_resize", (roi, scales, ""), **attrs)
    y = b.conv(b.conv(h, "conv3", 8, 8), "conv4", 8, 4, k=1, relu=False)
    return b.model("crop_cnn_aa" if antialias else "crop_cnn", [image()], [y], 19)


def fpn(seed: int = 0) -> onnx.ModelProto:
    """A three-level feature pyramid whose top-down Resizes use modes TensorRT rejects:
    half_pixel_symmetric, keep_aspect_ratio_policy=not_larger with axes, cubic antialias."""
    b = _Builder(seed)
    c1 = b.conv("x", "c1", 3, 8)
    c2 = b.conv(b.conv(b.pool(c1, "pool1"), "down2", 8, 8), "c2", 8, 8)
    c3 = b.conv(b.pool(c2, "pool2"), "c3", 8, 8)
    up3 = b.resize(c3, "up3", ("", b.const("up3.scales", [2.0, 2.0]), ""), mode="linear",
                   coordinate_transformation_mode="half_pixel_symmetric", axes=[2, 3])
    p2 = "p2"
    b.nodes.append(helper.make_node("Add", [up3, c2], [p2], name=p2))
    up2 = b.resize(p2, "up2", ("", "", b.const("up2.sizes", [16, 20], np.int64)), mode="nearest", axes=[2, 3],
                   keep_aspect_ratio_policy="not_larger")
    p1 = "p1"
    b.nodes.append(helper.make_node("Add", [up2, c1], [p1], name=p1))
    head = b.conv(p1, "head", 8, 8)
    small = b.resize(head, "shrink", ("", b.const("shrink.scales", [1, 1, 0.5, 0.5]), ""), mode="cubic",
                     antialias=1, cubic_coeff_a=-0.5)
    y = b.conv(small, "out", 8, 4, k=1, relu=False)
    return b.model("fpn", [image()], [y], 19)


def native_upsample(seed: int = 0) -> onnx.ModelProto:
    """A YOLO-style x2 nearest upsample TensorRT runs natively (for --plugin-ops comparisons)."""
    b = _Builder(seed)
    h = b.conv("x", "conv1", 3, 8)
    h = b.resize(h, "up", ("", b.const("up.scales", [1, 1, 2, 2]), ""), mode="nearest",
                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    y = b.conv(h, "conv2", 8, 4, relu=False)
    return b.model("native_upsample", [image()], [y], 13)


MODELS = {"crop_cnn": crop_cnn, "crop_cnn_antialias": lambda: crop_cnn(antialias=True), "fpn": fpn,
          "native_upsample": native_upsample}
