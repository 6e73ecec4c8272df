"""TensorRT's own ``tensorrt.plugin`` package (the pure-Python part of the ``tensorrt-cu13-bindings``
wheel, which installs without TensorRT's libraries) loaded over ``tensorrt_rtx``'s bindings, so
its registration validators and plugin creator run on the Resize plugin's registration here.

The wheel's ``tensorrt_bindings/__init__.py`` loads libnvinfer and is never executed: only its
``plugin`` folder is loaded, as ``tensorrt.plugin``, with ``tensorrt`` a module that forwards to
``tensorrt_rtx``. TensorRT-RTX lacks four names the package touches; the shim stands in for them
with the smallest thing that serves: ``QuickPluginCreationRequest`` (an enum of its four
members; its presence is how the package decides that ahead-of-time plugins exist),
``IPluginV3QuickAOTBuild`` and ``ISymExpr`` (base classes of the package's AOT plugin and
symbolic expressions), ``TensorDesc`` (named only in its docstrings).

Run it in a process of its own (``python -m tests.fakes.trt_plugin_shim``): registering puts a
Python plugin creator in TensorRT-RTX's process-wide registry, and TensorRT-RTX's ONNX parser
aborts the process when it meets a node matching one. The result is one JSON line."""
from __future__ import annotations

import enum
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import traceback
import types
from typing import Any

import numpy as np


class QuickPluginCreationRequest(enum.IntEnum):
    UNKNOWN = 0
    PREFER_JIT = 1
    PREFER_AOT = 2
    STRICT_JIT = 3
    STRICT_AOT = 4


class _StandIn:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


STAND_INS = {"QuickPluginCreationRequest": QuickPluginCreationRequest,
             "IPluginV3QuickAOTBuild": type("IPluginV3QuickAOTBuild", (_StandIn,), {}),
             "ISymExpr": type("ISymExpr", (_StandIn,), {}), "TensorDesc": type("TensorDesc", (_StandIn,), {})}


def plugin_package_dir() -> str | None:
    """The ``tensorrt_bindings/plugin`` folder of the installed tensorrt-cu13-bindings (None: not installed)."""
    spec = importlib.util.find_spec("tensorrt_bindings")  # (finds the package without running its __init__)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], "plugin")
    return folder if os.path.isfile(os.path.join(folder, "__init__.py")) else None


def bindings_version(folder: str) -> str:
    """The tensorrt-cu13-bindings version the plugin package ``folder`` came with."""
    site = os.path.dirname(os.path.dirname(folder))
    for name in sorted(os.listdir(site)):
        m = re.fullmatch(r"tensorrt_cu\d+_bindings-([\w.]+)\.dist-info", name)
        if m:
            return m.group(1)
    return importlib.metadata.version("tensorrt-cu13-bindings")


def load(folder: str | None = None) -> types.ModuleType:
    """``tensorrt`` (forwarding to tensorrt_rtx, with the stand-ins) whose ``plugin`` is TensorRT's
    package from ``folder``; both are put in ``sys.modules`` (this process is given to it)."""
    import tensorrt_rtx

    folder = folder or plugin_package_dir()
    if folder is None:
        raise ImportError("tensorrt-cu13-bindings is not installed (pip install tensorrt-cu13-bindings)")
    trt = types.ModuleType("tensorrt")
    trt.__dict__.update({k: v for k, v in vars(tensorrt_rtx).items() if not k.startswith("__")})
    trt.__dict__.update({k: v for k, v in STAND_INS.items() if not hasattr(tensorrt_rtx, k)})
    trt.__dict__["__version__"] = tensorrt_rtx.__version__
    trt.__path__ = []  # a package, so that "tensorrt.plugin" can be imported below it
    sys.modules["tensorrt"] = trt
    spec = importlib.util.spec_from_file_location("tensorrt.plugin", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    assert spec is not None and spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    sys.modules["tensorrt.plugin"] = plugin
    spec.loader.exec_module(plugin)
    trt.plugin = plugin  # type: ignore[attr-defined]
    return trt


def parser_fields(trt: types.ModuleType, creator: Any, attributes: dict[str, Any], keep: list[Any]) -> Any:
    """The plugin fields TensorRT's ONNX parser hands a plugin creator for a node with
    ``attributes``: each of the creator's fields, of the type it declares, holding the attribute's
    values (one element for a scalar attribute). A field points at its array without owning it:
    the arrays go to ``keep``, which must outlive the fields."""
    by_type = {trt.PluginFieldType.INT32: np.int32, trt.PluginFieldType.INT64: np.int64,
               trt.PluginFieldType.FLOAT32: np.float32, trt.PluginFieldType.FLOAT64: np.float64,
               trt.PluginFieldType.INT8: np.int8, trt.PluginFieldType.INT16: np.int16}
    fields = []
    for declared in creator.field_names:
        value = np.atleast_1d(np.asarray(attributes[declared.name], dtype=by_type[declared.type]))
        keep.append(value)
        fields.append(trt.PluginField(declared.name, value, declared.type))
    return trt.PluginFieldCollection(fields)


def check_resize(folder: str | None = None) -> dict[str, Any]:
    """Register the Resize plugin through TensorRT's decorators (their validators run), then create
    it through the registered creator as the ONNX parser does, ahead-of-time and just-in-time.
    ``folder``: the plugin package to use (default: the installed wheel's)."""
    folder = folder or plugin_package_dir()
    if folder is None:
        return {"error": "tensorrt-cu13-bindings is not installed (pip install tensorrt-cu13-bindings)"}
    result: dict[str, Any] = {"bindings": bindings_version(folder), "numpy": np.__version__}
    try:
        trt = load(folder)
        from plugins.resize import tensorrt as glue
        from plugins.resize.spec import PLUGIN_NAME, PLUGIN_NAMESPACE, ResizeParams

        result["aot_enabled"] = hasattr(trt.plugin, "aot_impl")
        glue.register(trt)
        result["registered"] = True
        creator = trt.get_plugin_registry().get_creator(PLUGIN_NAME, "1", PLUGIN_NAMESPACE)
        params = ResizeParams(4, 1, 2, 0, -0.75, 0, 0, 0.0, (1.0, 1.0, 2.0, 2.0), (-1, -1, -1, -1),
                              (0.0,) * 8)
        keep: list[Any] = []
        fc = parser_fields(trt, creator, params.to_attributes(), keep)
        result["field_types"] = {f.name: str(f.type).split(".")[-1] for f in creator.field_names}
        aot = creator.create_plugin(PLUGIN_NAME, PLUGIN_NAMESPACE, fc, trt.TensorRTPhase.BUILD,
                                    trt.QuickPluginCreationRequest.STRICT_AOT)
        result["aot_plugin"] = type(aot).__name__
        result["aot_attrs"] = {k: np.asarray(v).tolist() for k, v in aot.attrs.items()}
        jit = creator.create_plugin(PLUGIN_NAME, PLUGIN_NAMESPACE, fc, trt.TensorRTPhase.BUILD)
        result["jit_plugin"] = type(jit).__name__
        result["params_round_trip"] = glue.plugin_params(aot.attrs) == params
    except Exception as e:  # noqa: BLE001 - reported to the test, which names it
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc(limit=6)
    return result


if __name__ == "__main__":
    print(json.dumps(check_resize(sys.argv[1] if len(sys.argv) > 1 else None)))
