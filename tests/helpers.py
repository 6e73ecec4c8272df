"""Builders for hand-made test graphs and plan invariants; running work from several threads."""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def vi(name: str, shape: Sequence[int | str | None] | None, dtype: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: Sequence[onnx.TensorProto] = (), opset: int = 17, extra_opsets: Sequence[tuple[str, int]] = (),
          ir: int = 8) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "test", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)]
                          + [helper.make_opsetid(d, v) for d, v in extra_opsets])
    m.ir_version = ir
    return m


def crop_resize(inp: str, out: str, name: str | None = None) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """A shape-preserving Resize in ``tf_crop_and_resize`` mode, which TensorRT's parser rejects."""
    roi, scales = f"{out}.roi", f"{out}.scales"
    node = helper.make_node("Resize", [inp, roi, scales], [out], name=name or out, mode="linear",
                            coordinate_transformation_mode="tf_crop_and_resize")
    return node, [const(roi, np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)),
                  const(scales, np.array([1, 1, 1, 1], np.float32))]


def assert_plan_valid(plan) -> None:
    """Invariants every plan must hold: a partition of the nodes into backend-homogeneous
    segments whose inputs all come from earlier segments or the graph (so no cycle)."""
    graph = plan.model.proto.graph
    n = len(graph.node)
    seen = sorted(i for s in plan.segments for i in s.nodes)
    assert seen == list(range(n)), "every node in exactly one segment"
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    constants = constant_derived(plan)
    for k, seg in enumerate(plan.segments):
        assert seg.id == k
        assert not set(seg.copies) & set(seg.nodes), "a segment holds no copy of its own node"
        for i in seg.copies:
            assert all(o in constants for o in graph.node[i].output if o), f"copied node {i} is not constant-only"
            assert not set(graph.node[i].output) & set(seg.outputs), f"segment {seg.id} outputs a copy's tensor"
        for name in seg.inputs:
            assert name in available, f"segment {seg.id} reads '{name}' before any segment makes it"
        for i in seg.nodes:
            assert plan.nodes[i].segment == seg.id
            on_trt = plan.nodes[i].verdict == "tensorrt" or plan.nodes[i].verdict.startswith("plugin:")
            assert on_trt == (seg.backend == "tensorrt"), f"node {i} verdict {plan.nodes[i].verdict} in {seg.backend}"
        if k:
            assert seg.backend != plan.segments[k - 1].backend, "adjacent segments share a backend"
        available.update(o for i in seg.nodes for o in graph.node[i].output if o)
    for o in graph.output:
        assert o.name in available


def conv_resize_chain(blocks: int = 2) -> onnx.ModelProto:
    """x -> [Conv -> Resize(tf_crop_and_resize) -> Relu] * blocks -> y."""
    nodes, inits, prev = [], [const("w", np.ones((4, 4, 3, 3), np.float32))], "x"
    for b in range(blocks):
        resize, extra = crop_resize(f"c{b}", f"r{b}", name=f"resize{b}")
        nodes += [helper.make_node("Conv", [prev, "w"], [f"c{b}"], name=f"conv{b}", pads=[1, 1, 1, 1]), resize,
                  helper.make_node("Relu", [f"r{b}"], [f"y{b}"], name=f"relu{b}")]
        inits += extra
        prev = f"y{b}"
    nodes[-1].output[0] = "y"
    return model(nodes, [vi("x", [1, 4, 8, 8])], [vi("y", [1, 4, 8, 8])], inits)


def shared_constants_model(shape_output: bool = False) -> onnx.ModelProto:
    """x [N, 6] -> Relu -> Sin -> ..., where a scalar ``Constant`` (k), a scalar initializer (idx)
    and a ``ConstantOfShape``->``Cast`` chain (shp = [-1], a Reshape's shape) are read by Gather
    and Reshape nodes on both sides of the Sin (exclude it: ONNX Runtime), after it also as
    shape tensors (``Gather(Shape(s), k)`` -> ... -> a Reshape's shape). ``shape_output``: shp
    is a graph output too. Nodes 0-2 are the constant-only ones."""
    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k", value=const("kv", np.array(1, np.int64))),
        helper.make_node("ConstantOfShape", ["one"], ["neg"], name="fill",
                         value=helper.make_tensor("v", F, [1], [-1.0])),
        helper.make_node("Cast", ["neg"], ["shp"], name="cast", to=i64),
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Gather", ["a", "k"], ["ga"], name="ga", axis=1),
        helper.make_node("Gather", ["a", "idx"], ["gb"], name="gb", axis=1),
        helper.make_node("Reshape", ["a", "shp"], ["ra"], name="ra"),
        helper.make_node("Sin", ["a"], ["s"], name="sin"),
        helper.make_node("Gather", ["s", "k"], ["h1"], name="h1", axis=1),
        helper.make_node("Gather", ["s", "idx"], ["h2"], name="h2", axis=1),
        helper.make_node("Reshape", ["s", "shp"], ["rs"], name="rs"),
        helper.make_node("Add", ["h1", "ga"], ["y1"], name="y1"),
        helper.make_node("Add", ["h2", "gb"], ["y2"], name="y2"),
        helper.make_node("Add", ["rs", "ra"], ["y3"], name="y3"),
        helper.make_node("Shape", ["s"], ["sh"], name="sh"),  # y4 = s reshaped to [6, -1]: k and shp as shapes
        helper.make_node("Gather", ["sh", "k"], ["d"], name="d", axis=0),
        helper.make_node("Unsqueeze", ["d", "ax0"], ["d0"], name="d0"),
        helper.make_node("Tile", ["d0", "one"], ["d1"], name="d1"),
        helper.make_node("Concat", ["d1", "shp"], ["to"], name="to", axis=0),
        helper.make_node("Reshape", ["s", "to"], ["y4"], name="y4"),
    ]
    outputs = [vi("y1", ["N"]), vi("y2", ["N"]), vi("y3", [None]), vi("y4", [6, None])]
    if shape_output:
        outputs.append(vi("shp", [1], i64))
    return model(nodes, [vi("x", ["N", 6])], outputs,
                 [const("one", np.array([1], np.int64)), const("idx", np.array(2, np.int64)),
                  const("ax0", np.array([0], np.int64))])


def constant_derived(plan) -> set[str]:
    """Tensors of the plan's model that depend on no model input: initializers and what nodes
    make from them alone."""
    index = plan.model.index
    out = set(index.initializers) - set(index.graph_inputs)
    for i in index.order:
        if all(name in out for name in index.reads[i]):
            out.update(o for o in index.graph.node[i].output if o)
    return out


def in_threads(work: Callable[[int], None], n: int) -> list[BaseException]:
    """``work(0)`` .. ``work(n - 1)``, each in its own thread, released together; what they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def run(k: int) -> None:
        try:
            start.wait()
            work(k)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def compile_stages() -> tuple[Callable[..., Any], ...]:
    """The functions that plan, derive profiles and build engines: what loading a build folder
    must never run."""
    from partitioner.plan import build_plan, plan_model
    from trt_backend.compiler import compile as compile_model
    from trt_backend.engines.fallback import build_engines, build_with_fallback
    from trt_backend.planning import make_plan, plan_for
    from trt_backend.profiles.derive import calibrate, derive_profiles

    return (compile_model, make_plan, plan_for, plan_model, build_plan, derive_profiles, calibrate,
            build_with_fallback, build_engines)


@contextmanager
def stage_spy(functions: Sequence[Callable[..., Any]]) -> Iterator[list[str]]:
    """Records each call of ``functions`` however the code reaches them (an imported name, an
    attribute, a module alias): calls are matched by code object, in this thread and in threads
    started within the block."""
    codes = {f.__code__: f"{f.__module__}.{f.__qualname__}" for f in functions}
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes:
            calls.append(codes[frame.f_code])

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


OPTIONAL_SKIP = "optional:"


def skip_optional(what: str) -> NoReturn:
    """Skip a test that needs ``what``, a package only tests/install.sh installs; tests/conftest.py
    counts these skips. Under CI=1 the test fails instead, since CI runs that script."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must install {what} (tests/install.sh)")
    pytest.skip(f"{OPTIONAL_SKIP} {what} not installed (tests/install.sh installs it)")


def refuse_to_start(monkeypatch: pytest.MonkeyPatch, name: str, error: BaseException) -> None:
    """``threading.Thread.start`` raises ``error`` for a thread named ``name`` (no thread to be had,
    or a Ctrl-C as it starts); the others start as usual."""
    start = threading.Thread.start

    def refusing(self: threading.Thread) -> None:
        if self.name == name:
            raise error
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refusing)
