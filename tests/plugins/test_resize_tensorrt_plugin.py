"""The Resize plugin's registration (plugins/resize/tensorrt.py) through TensorRT's own
``tensorrt.plugin`` package: its decorators' validators (register, autotune, aot_impl, impl) and
its plugin creator, fed the fields TensorRT's ONNX parser makes from a rewritten node, for the
ahead-of-time and the just-in-time plugin. The package comes from the ``tensorrt-cu13-bindings``
wheel (no TensorRT libraries needed) and runs over ``tensorrt_rtx``'s bindings through
tests/fakes/trt_plugin_shim.py, in a child process (registering touches TensorRT-RTX's
process-wide plugin registry).

Two packages: the installed one (the newest 11.x), and 11.1's, whose creator converts an
attribute declared ``int``/``float`` with ``int(field.data)``, which NumPy 2.4 refuses
(tests/install.sh installs it beside the venv's site-packages)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import skip_optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = {"installed": None,
            "11.1": os.path.join(sys.prefix, "tensorrt-plugin-11.1", "tensorrt_bindings", "plugin")}


def _require_ci(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must install {what}")
    pytest.skip(f"{what} not installed")


def run_shim(folder: str | None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tests.fakes.trt_plugin_shim", *([folder] if folder else [])],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("package", list(PACKAGES))
def test_tensorrt_plugin_validates_registers_and_creates_the_resize_plugin(package, flavor) -> None:
    from tests.fakes.trt_plugin_shim import plugin_package_dir

    folder = PACKAGES[package]
    if folder is None and plugin_package_dir() is None:
        _require_ci("tensorrt-cu13-bindings (setup.py's test extra)")
    if folder is not None and not os.path.isdir(folder):
        skip_optional(f"tensorrt-cu13-bindings {package} in {os.path.dirname(os.path.dirname(folder))}")
    result = run_shim(folder)
    assert "error" not in result, f"{result['error']}\n{result.get('traceback', '')}"
    if folder is not None:
        assert result["bindings"].startswith(package), result["bindings"]
    # the AOT path exists (TensorRT >= 10.9) and its validator took the aot_impl signature
    assert result["aot_enabled"] and result["registered"]
    assert result["aot_plugin"] == "_TemplateAOTPlugin" and result["jit_plugin"] == "_TemplateJITPlugin"
    # every attribute reached the plugin with its value, scalars as 1-element arrays
    assert result["aot_attrs"]["mode"] == [1] and result["aot_attrs"]["cubic_coeff_a"] == [-0.75]
    assert result["params_round_trip"]
