"""The plugin registry (an instance), the engine-build rewrite, and the TensorRT names the
registration glue uses."""
from __future__ import annotations

import importlib.metadata
import pickle
import re

import numpy as np
import onnx
import pytest
from onnx import helper

import plugins
from tests.support.resize_models import crop_cnn, fpn
from partitioner import Claim, OptionsError, PluginClaim, load_model
from plugins import Registry, claimed_nodes, default_registry, rewrite_for_engine
from plugins.resize import record
from plugins.resize.tensorrt import (
    PLUGIN_ID,
    TENSORRT_API,
    TENSORRT_PLUGIN_API,
    register,
)
from tests.helpers import skip_optional

# The public names of ``tensorrt.plugin`` (NVIDIA/TensorRT python/packaging/bindings_wheel/
# tensorrt/plugin: @public_api() in _plugin_class.py, _tensor.py, _top_level.py, _autotune.py,
# _lib.py), with the members the glue touches. Checked live where full TensorRT is installed.
TENSORRT_PLUGIN_PUBLIC = {
    "register", "impl", "aot_impl", "autotune", "AutoTuneCombination", "TensorDesc", "Tensor", "Shape",
    "ShapeExpr", "ShapeExprs", "SizeTensorDesc", "SizeTensorShapeExpr", "SymExprs", "SymIntExprs", "SymInt8",
    "SymInt16", "SymInt32", "KernelLaunchParams", "cdiv", "max", "min", "size_tensor", "from_shape_expr",
    "TensorDesc.like", "TensorDesc.aliased", "TensorDesc.shape_expr", "TensorDesc.dtype", "TensorDesc.ndim",
    "ShapeExpr.is_fake", "ShapeExpr.is_constant", "ShapeExpr.constant_value", "ShapeExpr.is_size_tensor",
    "ShapeExprs.numel", "KernelLaunchParams.grid_x", "KernelLaunchParams.grid_y", "KernelLaunchParams.grid_z",
    "KernelLaunchParams.block_x", "KernelLaunchParams.block_y", "KernelLaunchParams.block_z",
    "KernelLaunchParams.shared_mem", "Tensor.data_ptr", "Tensor.shape", "Tensor.dtype", "Tensor.numel",
}


def test_registry_is_an_instance_and_records_satisfy_the_claim_protocol() -> None:
    a, b = default_registry(), default_registry()
    assert a is not b and len(a) == len(b) == 1 and "resize" in a
    rec = a.get("resize")
    assert isinstance(rec, PluginClaim)
    assert (rec.op_type, rec.plugin_op, rec.plugin_namespace) == ("Resize", "TrtBackendResize", "trt_backend")
    assert a.op_types == {"Resize"} and a.plugin_ops == {"TrtBackendResize"}
    with pytest.raises(ValueError, match="already in this registry"):
        a.add(record())
    with pytest.raises(OptionsError, match="no plugin covers op type\\(s\\) Det"):
        a.select(["Det"])
    assert len(Registry()) == 0 and len(b) == 1  # adding to one registry touched no other
    assert pickle.loads(pickle.dumps(a.claims()))[0] == rec


def test_record_claims_with_reasons_and_knows_its_targets() -> None:
    m = load_model(crop_cnn())
    rec = default_registry().get("resize")
    resize = next(n for n in m.proto.graph.node if n.op_type == "Resize")
    conv = m.proto.graph.node[0]
    assert rec.claim(resize, m) == Claim(True, None)
    assert rec.claim(conv, m) == Claim(False, None)
    assert rec.target_problem("tensorrt") is None
    assert "TensorRT-RTX 1.7 has no Python plugin support" in (rec.target_problem("tensorrt_rtx") or "")
    params = rec.params(resize, m)
    x = np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype(np.float32)
    assert rec.host_reference(params, x).shape == (1, 8, 32, 32)
    assert rec.output_shape(params, ["N", 8, 16, 16]) == ["N", 8, 32, 32]


def test_rewrite_for_engine_turns_claimed_nodes_into_plugin_nodes(oracle) -> None:
    from partitioner import PartitionOptions, plan_model

    registry = default_registry()
    plan = plan_model(fpn(), oracle, PartitionOptions(plugins=registry.claims(), target="tensorrt"))
    assert len(plan.segments) == 1
    wanted = claimed_nodes(plan, 0)
    assert wanted == {"up3": "resize", "up2": "resize", "shrink": "resize"}
    segment = plan.extract(0)
    engine_copy = rewrite_for_engine(segment, registry, wanted)
    onnx.checker.check_model(engine_copy)
    ops = [(n.op_type, n.domain) for n in engine_copy.graph.node]
    assert ops.count(("TrtBackendResize", "trt_backend")) == 3 and ("Resize", "") not in ops
    up2 = next(n for n in engine_copy.graph.node if n.name == "up2")
    attrs = {a.name: helper.get_attribute_value(a) for a in up2.attribute}
    assert list(up2.input) == ["p2"] and attrs["plugin_namespace"] == b"trt_backend" and attrs["aot"] == 1
    assert attrs["sizes"] == [-1, -1, 16, 16] and attrs["mode"] == 0  # not_larger: min(16/8, 20/8) = 2
    assert {i.name for i in engine_copy.graph.initializer}.isdisjoint({"up3.scales", "up2.sizes", "shrink.scales"})
    assert ("trt_backend", 1) in [(o.domain, o.version) for o in engine_copy.opset_import]
    assert [n.op_type for n in segment.graph.node].count("Resize") == 3  # the emulated copy is untouched
    assert rewrite_for_engine(segment, registry).graph.node[-2].op_type in ("TrtBackendResize", "Conv")
    with pytest.raises(OptionsError, match="not in this segment"):
        rewrite_for_engine(segment, registry, {"nope": "resize"})


def test_register_with_refuses_tensorrt_rtx() -> None:
    rtx = pytest.importorskip("tensorrt_rtx")
    with pytest.raises(ValueError, match="TensorRT-RTX cannot take Python plugins"):
        plugins.register_with(rtx)
    assert not hasattr(rtx, "plugin")  # measured: the RTX wheel has no tensorrt_rtx.plugin
    assert PLUGIN_ID == "trt_backend::TrtBackendResize" and callable(register)


def test_tensorrt_names_exist_in_rtx_and_in_the_stubs() -> None:
    rtx = pytest.importorskip("tensorrt_rtx")
    for name in TENSORRT_API:
        obj = rtx
        for part in name.split("."):
            assert hasattr(obj, part), name
            obj = getattr(obj, part)
    try:
        dist = importlib.metadata.distribution("tensorrt-stubs")
    except importlib.metadata.PackageNotFoundError:
        skip_optional("tensorrt-stubs==10.13.*")
    text = open(str(dist.locate_file("tensorrt_bindings/tensorrt.pyi")), encoding="utf-8").read()
    for name in TENSORRT_API:
        if "." in name:
            owner, member = name.split(".")
            body = text.split(f"class {owner}")[1]
            assert re.search(rf"^\s+{member}\b", body, re.M), name


def test_tensorrt_plugin_names_are_public_api() -> None:
    assert set(TENSORRT_PLUGIN_API) <= TENSORRT_PLUGIN_PUBLIC
    try:
        import tensorrt.plugin as trtp  # full TensorRT only (GPU machines)
    except Exception:  # noqa: BLE001 - absent or unloadable here: the pinned list above decides
        return
    for name in TENSORRT_PLUGIN_API:
        obj = trtp
        for part in name.split("."):
            assert hasattr(obj, part), name
            obj = getattr(obj, part)
