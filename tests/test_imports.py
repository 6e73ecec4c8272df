"""Every module imports with only onnx and numpy: TensorRT, CUDA, ONNX Runtime and Polygraphy
load on first use. And the public facades export what they say."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import partitioner
import trt_backend

BLOCKER = textwrap.dedent("""
    import importlib.abc, pkgutil, sys, importlib
    BLOCKED = ("tensorrt", "tensorrt_rtx", "cuda", "pycuda", "onnxruntime", "polygraphy", "cupy", "torch")
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
    for name in partitioner.__all__:
        assert getattr(partitioner, name) is not None, name
    for name in trt_backend.__all__:
        assert getattr(trt_backend, name) is not None, name
    assert "Session" in trt_backend.__all__ and "plan_model" in partitioner.__all__
