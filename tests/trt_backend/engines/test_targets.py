"""What engines are built for and where they may run: TensorRT-RTX's targets on a Turing GPU,
folders built for hardware compatibility or version compatibility, and builds on one GPU one at a
time. GPUs are the contract-strict CUDA fake's (tests/fakes/); builds are real TensorRT-RTX
builds on the CPU; runners load fake plans through the real TensorRTRunner."""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from partitioner import Segment
from partitioner.capability import QueryResult
from tests.fakes.cuda_runtime import FakeGpu
from tests.fakes.machine import FakeMachine
from trt_backend.artifacts import read
from trt_backend.engines.builder import BuildOptions, compile_segment
from trt_backend.engines.config import configure
from trt_backend.engines.fallback import build_engines
from trt_backend.engines.targets import build_target, rtx_targets
from trt_backend.errors import SegmentLoadError
from trt_backend.runners.tensorrt import TensorRTRunner
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session
from trt_backend.tensorrt.flavor import Flavor

pytestmark = pytest.mark.usefixtures("flavor")


def relu_model():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def turing(monkeypatch):
    machine = FakeMachine(monkeypatch, [FakeGpu(sm=(7, 5))])
    yield machine
    machine.check()


# ------------------------------------------------------------------ TensorRT-RTX on SM 7.5


def test_an_rtx_build_for_a_turing_gpu_targets_sm75(turing, flavor) -> None:
    if not flavor.is_rtx:
        pytest.skip("compute capabilities are a TensorRT-RTX option")
    assert rtx_targets(flavor, BuildOptions()) == ("SM75",)
    assert build_target(flavor, BuildOptions()) == "cc:SM75"
    assert build_target(flavor, BuildOptions(compute_capabilities=("sm86",))) == "cc:SM86"  # (what was asked wins)
    config = flavor.module.Builder(flavor.module.Logger()).create_builder_config()
    configure(config, BuildOptions(), flavor)
    assert config.num_compute_capabilities == 1
    assert config.get_compute_capability(0) == flavor.module.ComputeCapability.SM75
    assert len(compile_segment(relu_model(), [], BuildOptions(), flavor).engine) > 1000  # a real build, on the CPU


def manifest(target: str, tensorrt: str, built_on: str | None = None, **build: Any) -> dict[str, Any]:
    return {"tensorrt": tensorrt, "gpu_target": target, "built_on_sm": built_on, "build_options": build}


def here(monkeypatch, name: str, version: str) -> str:
    import tensorrt_rtx

    monkeypatch.setattr(read, "load_flavor", lambda choice="auto": Flavor(name, version, tensorrt_rtx))
    return f"{name} {version}"


def test_a_folder_built_for_rtx_defaults_is_refused_on_sm75_with_the_fix(turing, monkeypatch) -> None:
    rtx = here(monkeypatch, "tensorrt_rtx", "1.7.1")
    assert read.runtime_mismatch(manifest("cc:default", rtx)) == (
        "engines were built for TensorRT-RTX's default targets (SM 8.0 and later, not 7.5), this GPU is SM 7.5 "
        "(rebuild with --compute-capabilities SM75)")
    assert read.runtime_mismatch(manifest("cc:SM75,SM86", rtx)) is None


# ------------------------------------------------------------------ hardware and version compatibility


@pytest.fixture
def ampere(monkeypatch):
    machine = FakeMachine(monkeypatch, [FakeGpu(sm=(8, 6))], rtx=False, version="10.13.0")
    yield machine
    machine.check()


def test_hardware_compatible_folders_run_on_the_gpus_they_target(ampere, monkeypatch) -> None:
    trt = here(monkeypatch, "tensorrt", "10.13.0")
    assert read.runtime_mismatch(manifest("hw:ampere_plus", trt, "89")) is None
    assert read.runtime_mismatch(manifest("hw:same_compute_capability", trt, "86")) is None
    assert read.runtime_mismatch(manifest("hw:same_compute_capability", trt, "89")) == \
        "engines were built for GPUs of the build GPU's compute capability, this GPU is SM 8.6"
    assert read.runtime_mismatch(manifest("sm:89", trt)) == "engines were built for SM 8.9, this GPU is SM 8.6"


def test_version_compatible_folders_run_on_later_tensorrt_of_the_same_major(ampere, monkeypatch) -> None:
    here(monkeypatch, "tensorrt", "10.13.0")
    embedded: dict[str, Any] = {"version_compatible": True, "exclude_lean_runtime": False}
    assert read.runtime_mismatch(manifest("hw:ampere_plus", "tensorrt 10.8.0", **embedded),
                                 allow_host_code=True) is None
    assert "allow_host_code=True" in (read.runtime_mismatch(manifest("hw:ampere_plus", "tensorrt 10.8.0", **embedded))
                                      or "")
    lean: dict[str, Any] = {"version_compatible": True, "exclude_lean_runtime": True}
    assert "SessionOptions(lean_runtime=PATH)" in (read.runtime_mismatch(
        manifest("hw:ampere_plus", "tensorrt 10.8.0", **lean)) or "")
    assert read.runtime_mismatch(manifest("hw:ampere_plus", "tensorrt 10.8.0", **lean), lean_runtime="/x") is None
    assert read.runtime_mismatch(manifest("hw:ampere_plus", "tensorrt 10.13.0", **lean)) is None  # same version
    assert "from 10.14.0 on" in (read.runtime_mismatch(manifest("hw:ampere_plus", "tensorrt 10.14.0", **embedded),
                                                       allow_host_code=True) or "")
    assert read.runtime_mismatch(manifest("hw:ampere_plus", "tensorrt 10.8.0")) == \
        "engines were built with tensorrt 10.8.0, this machine has tensorrt 10.13.0"


def test_version_compatible_engines_load_their_lean_runtime(ampere, tmp_path) -> None:
    segment = Segment(0, "tensorrt", (0,), ("x",), ("y",))
    x = np.array([[1, -2, 3, -4]] * 2, np.float32)
    embedded = ampere.plan_bytes(relu_model(), version="10.8.0", version_compatible=True, lean_runtime_embedded=True)
    with pytest.raises(SegmentLoadError, match="engine_host_code_allowed is False"):
        TensorRTRunner(segment, embedded, ampere.flavor)
    r = TensorRTRunner(segment, embedded, ampere.flavor, allow_host_code=True)
    np.testing.assert_array_equal(r.run([x])[0], np.maximum(x, 0))
    r.close()
    without = ampere.plan_bytes(relu_model(), version="10.8.0", version_compatible=True)
    with pytest.raises(SegmentLoadError, match="excludes its lean runtime: load it with load_runtime"):
        TensorRTRunner(segment, without, ampere.flavor)
    library = tmp_path / "libnvinfer_lean.so.10"
    library.write_text("10.8.0")  # (the fake's lean runtime names the version it loads)
    r = TensorRTRunner(segment, without, ampere.flavor, lean_runtime=str(library))
    np.testing.assert_array_equal(r.run([x])[0], np.maximum(x, 0))
    r.close()


# ------------------------------------------------------------------ builds on one GPU


class AcceptAll:
    target = "accept-all"

    def query(self, model: Any) -> QueryResult:
        return QueryResult(True)


class CountingBuilds:
    """A TensorRT module forwarding to tensorrt_rtx whose builders count builds running at once."""

    def __init__(self, real: Any) -> None:
        self.real, self.running, self.most = real, 0, 0
        self.lock = threading.Lock()
        outer = self

        class Builder:
            def __init__(self, logger: Any) -> None:
                self._b = real.Builder(logger)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._b, name)

            def build_serialized_network(self, network: Any, config: Any) -> Any:
                with outer.lock:
                    outer.running += 1
                    outer.most = max(outer.most, outer.running)
                try:
                    time.sleep(0.2)  # (wide enough for a second build to start meanwhile)
                    return self._b.build_serialized_network(network, config)
                finally:
                    with outer.lock:
                        outer.running -= 1

        self.Builder = Builder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("name", ["tensorrt", "tensorrt_rtx"])
def test_engines_build_one_at_a_time_with_every_flavor(name, flavor) -> None:
    """Full TensorRT times tactics on the GPU while it builds; and two threads in TensorRT at once
    can deadlock with the GIL (trt_backend.tensorrt.flavor.tensorrt_lock): four workers, one build
    at a time, with either flavor."""
    most = 1
    counting = CountingBuilds(flavor.module)
    fl = Flavor(name, flavor.version, counting)  # type: ignore[arg-type]
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    plan = Session.make_plan(model, SessionOptions(oracle=AcceptAll(), exclude_ops=("Exp",), min_segment_size=1,
                                                   boundary_cost=None))
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]
    result = build_engines(plan, [], BuildOptions(max_workers=4), flavor=fl)
    assert sorted(result.engines) == [0, 2] and counting.most == most
    # each segment's seconds are its own build's: the one that waited for the other's (0.2 s of
    # sleep inside it) does not count that wait
    own = [s.seconds for s in result.report.segments]
    assert len(own) == 2 and max(own) < result.report.seconds - 0.15, (own, result.report.seconds)
