"""Every module imports with only onnx and numpy: TensorRT, CUDA, ONNX Runtime and Polygraphy
load on first use. And the public facades export what they say."""
from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest

import partitioner
import trt_backend

BLOCKER = textwrap.dedent("""
    import importlib.abc, pkgutil, sys, importlib
    BLOCKED = ("tensorrt", "tensorrt_rtx", "cuda", "pycuda", "onnxruntime", "polygraphy", "cupy", "torch", "ray")
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked for this test: {name}")
            return None
    sys.meta_path.insert(0, Block())
    count = 0
    for pkg in ("partitioner", "plugins", "trt_backend"):
        mod = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(mod.__path__, pkg + "."):
            if info.name.endswith("__main__"):
                continue
            importlib.import_module(info.name)
            count += 1
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(count, leaked)
""")


def test_every_module_imports_without_runtimes() -> None:
    proc = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, leaked = proc.stdout.split(" ", 1)
    assert int(count) >= 10
    assert leaked.strip() == "[]"


def test_public_facades() -> None:
    """Every name a facade lists resolves (a missing one raises AttributeError) to our own code."""
    for package in (partitioner, trt_backend):
        for name in package.__all__:
            value = getattr(package, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert value.__module__.split(".")[0] in ("partitioner", "trt_backend"), (name, value.__module__)
    assert "Session" in trt_backend.__all__ and "plan_model" in partitioner.__all__


RUNTIMES = ("onnxruntime", "tensorrt", "tensorrt_rtx", "cuda", "pycuda", "polygraphy", "cupy", "torch")


def test_partitioner_source_imports_no_runtime_anywhere() -> None:
    """Not even inside a function: the partitioner is pure ONNX (the capability oracle and the
    IR-version cap are passed in), and it never reaches up into trt_backend."""
    import ast
    import os

    root = os.path.dirname(partitioner.__file__)
    found = []
    for name in sorted(os.listdir(root)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(root, name), encoding="utf-8") as f:
            tree = ast.parse(f.read(), name)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if not node.level else []
            found += [f"{name}:{node.lineno} {m}" for m in mods if m.split(".")[0] in (*RUNTIMES, "trt_backend")]
    assert len([n for n in os.listdir(root) if n.endswith(".py")]) >= 10
    assert found == []


PLAN_CHILD = textwrap.dedent("""
    import importlib.abc, json, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "onnxruntime":
                raise ImportError(f"blocked for this test: {name}")
            return None
    if sys.argv[1] == "blocked":
        sys.meta_path.insert(0, Block())
    import onnx
    from partitioner import PartitionOptions, plan_model
    from trt_backend.data.demo import demo_model
    from trt_backend.tensorrt.flavor import load_flavor
    from trt_backend.tensorrt.oracle import ParserOracle
    m = demo_model()
    m.ir_version = onnx.IR_VERSION + 2  # too new for anyone: normalisation must lower it the same way
    plan = plan_model(m, ParserOracle(load_flavor("auto")), PartitionOptions(min_segment_size=1))
    d = plan.to_dict()
    d.pop("seconds", None)
    print(json.dumps({"plan": d, "ir": plan.model.proto.ir_version,
                      "ort_loaded": any(k.split(".")[0] == "onnxruntime" for k in sys.modules)}, sort_keys=True))
""")


def test_partitioner_plans_identically_with_onnxruntime_absent(flavor) -> None:
    import json

    runs = {}
    for mode in ("blocked", "present"):
        proc = subprocess.run([sys.executable, "-c", PLAN_CHILD, mode], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs["blocked"]["ort_loaded"] is False
    assert runs["blocked"]["plan"] == runs["present"]["plan"]
    assert runs["blocked"]["ir"] == runs["present"]["ir"]
    assert [s["backend"] for s in runs["blocked"]["plan"]["segments"]] == ["tensorrt", "onnxruntime", "tensorrt"]


COMMAND_IMPORTS = textwrap.dedent("""
    import os, sys, tempfile
    from trt_backend.cli import main
    from trt_backend.data.demo import DEMO_PATH
    if sys.argv[1] == "inspect":
        code = main(["inspect", DEMO_PATH])
    else:
        code = main(["build", DEMO_PATH, "-o", os.path.join(tempfile.mkdtemp(), "b"), "--shapes", "image:1x3x32x32"])
    assert code == 0, code
    print(" ".join(sorted(sys.modules)), file=sys.stderr)
""")

# What a command must not load (beside what it runs): the other commands' paths and runtimes.
NOT_LOADED = {
    "inspect": ("trt_backend.artifacts", "trt_backend.compiler", "trt_backend.accuracy", "trt_backend.runners",
                "trt_backend.session", "trt_backend.engines.builder", "trt_backend.profiles", "onnxruntime",
                "polygraphy", "partitioner.picture"),
    "build": ("trt_backend.accuracy.auto_precision", "trt_backend.accuracy.compare", "trt_backend.session.session",
              "trt_backend.runners.tensorrt", "polygraphy", "partitioner.picture", "trt_backend.serve"),
}


@pytest.mark.usefixtures("flavor")
@pytest.mark.parametrize("command", sorted(NOT_LOADED))
def test_a_command_loads_only_what_it_uses(command: str) -> None:
    """``inspect`` of a model reads no build folders and compiles nothing; ``build`` without
    ``--precision auto`` loads no precision search; neither draws a picture it was not asked for."""
    proc = subprocess.run([sys.executable, "-c", COMMAND_IMPORTS, command], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = proc.stderr.strip().splitlines()[-1].split()
    assert "trt_backend.planning" in loaded
    assert [m for m in loaded if m.startswith(NOT_LOADED[command])] == []
