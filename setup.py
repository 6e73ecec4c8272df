import os
import re

from setuptools import find_packages, setup


def _version() -> str:
    """The version trt_backend/_version.py holds: the one place it is written."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "trt_backend", "_version.py"),
              encoding="utf-8") as f:
        match = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if match is None:
        raise RuntimeError("trt_backend/_version.py holds no __version__ line")
    return match.group(1)


setup(
    name="trt-backend",
    version=_version(),
    description="TensorRT engine builder with ONNX Runtime fallback partitioning",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["partitioner", "partitioner.*", "plugins", "plugins.*",
                                    "trt_backend", "trt_backend.*"]),
    package_data={"partitioner": ["py.typed"], "plugins": ["py.typed", "resize/*.cu"],
                  "trt_backend": ["py.typed", "data/*.onnx"]},
    install_requires=["onnx>=1.16", "numpy>=1.23"],
    extras_require={
        "cpu": ["onnxruntime>=1.18", "tensorrt-rtx-cu13>=1.7", "polygraphy>=0.53.4,<0.54"],
        "gpu": ["onnxruntime-gpu>=1.18", "tensorrt>=10.0", "cuda-python>=12.6", "nvidia-cuda-nvrtc>=13.0",
                "polygraphy>=0.53.4,<0.54"],
        "test": ["pytest>=7", "pytest-timeout>=2.1", "onnxscript>=0.1", "cuda-python>=12.6", "nvidia-cuda-nvrtc>=13.0",
                 "scikit-learn", "skl2onnx", "matplotlib", "tritonclient[grpc]", "tensorrt-cu13-bindings>=11.1"],
        "bench": ["onnx-graphsurgeon", "matplotlib"],
        "serve": ["ray[serve]>=2.60"],
        # the lint gates .ci/run applies; newer ruff and mypy releases add checks, so each is held to
        # the release line the code was last checked with
        "dev": ["ruff~=0.17.6", "mypy~=2.4.1"],
    },
    entry_points={"console_scripts": ["trt-backend=trt_backend.cli:script_main"]},
)
