"""The bundled demo model: a small image classifier whose Resize uses ``tf_crop_and_resize``,
a mode TensorRT's ONNX importer rejects, so it plans as TensorRT / ONNX Runtime / TensorRT."""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEMO_PATH = os.path.join(os.path.dirname(__file__), "demo.onnx")


def demo_model() -> onnx.ModelProto:
    """Build the demo model (deterministic: fixed seed, fixed names)."""
    rng = np.random.default_rng(2026)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    inits = [
        weight("conv1.w", 8, 3, 3, 3), weight("conv1.b", 8),
        weight("conv2.w", 8, 8, 3, 3), weight("conv2.b", 8),
        weight("conv3.w", 16, 8, 3, 3), weight("conv3.b", 16),
        weight("fc.w", 16, 10), weight("fc.b", 10),
        numpy_helper.from_array(np.array([0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9], np.float32), "crop.roi"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "crop.scales"),
        numpy_helper.from_array(np.array([3], np.int64), "topk.k"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Resize", ["r2", "crop.roi", "crop.scales"], ["up"], name="crop_resize", mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=0.0),
        helper.make_node("Conv", ["up", "conv3.w", "conv3.b"], ["c3"], name="conv3", pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
        helper.make_node("TopK", ["probs", "topk.k"], ["top_scores", "top_classes"], name="top3", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "trt_backend_demo",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10]),
         helper.make_tensor_value_info("top_scores", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("top_classes", TensorProto.INT64, ["batch", 3])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="trt-backend demo")
    model.ir_version = 8
    return model


if __name__ == "__main__":  # regenerate the bundled file: python -m trt_backend.data.demo
    onnx.save(demo_model(), DEMO_PATH)
