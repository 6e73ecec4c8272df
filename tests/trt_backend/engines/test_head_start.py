"""The head start: a build hands the model file to TensorRT before it loads and plans the model,
and the compile path takes that engine only where it is the one it would build. Each door's
folder is compared byte for byte with the folder the same build writes without a head start
(TensorRT-RTX's ahead-of-time engines are deterministic), so the head start changes when the
engine is built, never what is built."""
from __future__ import annotations

import json
import logging
import os
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from partitioner import PartitionOptions, wire
from tests.helpers import refuse_to_start
from tests.support.folders import folder
from tests.support.small_cnn import PROFILES, SHAPES, small_cnn
from trt_backend.artifacts.write import build
from trt_backend.cli import main
from trt_backend.commands import _head_start
from trt_backend.engines import head_start
from trt_backend.engines.builder import BuildOptions
from trt_backend.session.options import SessionOptions
from trt_backend.session.session import Session

pytestmark = pytest.mark.usefixtures("flavor")

@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Records what the real head start functions did: started (or not), claimed (or not)."""
    seen: dict[str, list[Any]] = {"started": [], "claimed": []}
    real_start, real_claim = head_start.launch, head_start.claim

    def start(*args: Any, **kw: Any) -> Any:
        head = real_start(*args, **kw)
        seen["started"].append(head)
        return head

    def claim(*args: Any, **kw: Any) -> Any:
        head = real_claim(*args, **kw)
        seen["claimed"].append(head)
        return head

    monkeypatch.setattr(head_start, "launch", start)
    monkeypatch.setattr(head_start, "claim", claim)
    return seen


def without_head_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head_start, "launch", lambda *a, **kw: None)


def no_scratch(parent: str) -> None:
    assert not [n for n in os.listdir(parent) if n.startswith(".head-start-")]


def test_cli_build_takes_the_head_start_engine_and_writes_the_same_folder(tmp_path, spy, monkeypatch,
                                                                          caplog) -> None:
    model = small_cnn(str(tmp_path / "cnn.onnx"))
    caplog.set_level(logging.DEBUG, logger="trt_backend.planning")
    assert main(["build", model, "-o", str(tmp_path / "head"), *SHAPES]) == 0
    # the planner took the parser's answer the head start asked before it built: no parse of its own
    assert [r.message for r in caplog.records if "came from its early parse" in r.message]
    assert len(spy["started"]) == 1 and spy["started"][0] is not None
    assert spy["claimed"] == [spy["started"][0]]  # the one segment's engine came from the head start
    no_scratch(str(tmp_path))
    manifest = json.load(open(tmp_path / "head" / "manifest.json"))  # the build's time holds its engine's
    assert manifest["build_seconds"] >= manifest["segments"][0]["build_seconds"] > 0
    assert main(["build", model, "-o", str(tmp_path / "referring"), *SHAPES, "--weights-by-reference"]) == 0
    assert spy["claimed"][-1] is spy["started"][-1] is not None  # where the folder's weights go: the same engine
    with open(tmp_path / "head" / "segment_0.engine", "rb") as a, open(tmp_path / "referring" / "segment_0.engine",
                                                                          "rb") as b:
        assert a.read() == b.read()

    without_head_start(monkeypatch)
    caplog.clear()
    assert main(["build", model, "-o", str(tmp_path / "plain"), *SHAPES]) == 0
    assert spy["claimed"][-1] is None
    assert not [r for r in caplog.records if "came from its early parse" in r.message]
    head, plain = folder(str(tmp_path / "head")), folder(str(tmp_path / "plain"))
    assert head.keys() == plain.keys() and "segment_0.engine" in head
    assert head == plain  # the engine, the segment and model files and the manifest, byte for byte

    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = Session.load(str(tmp_path / "head"), SessionOptions(emulate=True)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_plan_that_is_not_the_whole_model_builds_without_it(tmp_path, spy, monkeypatch) -> None:
    """TensorRT takes this two-node model whole, but a TensorRT segment of two nodes is below the
    partition's minimum: the plan runs it on ONNX Runtime, does not take the head start's engine,
    and the folder is the one written without a head start."""
    path = _two_nodes(str(tmp_path / "two.onnx"))
    manifest = build(path, str(tmp_path / "head"), [{"x": ((1, 8), (2, 8), (4, 8))}])
    assert spy["started"] and spy["started"][0] is not None and spy["started"][0].problem is None
    assert spy["claimed"] == []  # no TensorRT segment to build
    assert [s["backend"] for s in manifest["segments"]] == ["onnxruntime"]
    no_scratch(str(tmp_path))
    without_head_start(monkeypatch)
    build(path, str(tmp_path / "plain"), [{"x": ((1, 8), (2, 8), (4, 8))}])
    assert folder(str(tmp_path / "head")) == folder(str(tmp_path / "plain"))


def test_other_partition_options_start_none(tmp_path, spy) -> None:
    """Partition options of the user's (here: Relu kept on ONNX Runtime) seldom plan the model
    whole: the Python door starts no head start for them, as the command line does not."""
    model = small_cnn(str(tmp_path / "cnn.onnx"))
    options = SessionOptions(partition=PartitionOptions(exclude_ops=("Relu",), min_segment_size=1))
    manifest = build(model, str(tmp_path / "out"), PROFILES, options)
    assert spy["started"] == [] and spy["claimed"] == []
    assert [s["backend"] for s in manifest["segments"]] == ["tensorrt", "onnxruntime", "tensorrt"]


def test_an_old_exporters_file_is_built_from_the_file_with_or_without_it(tmp_path, spy, monkeypatch) -> None:
    """An IR 3 file: unnamed nodes, its weights listed as graph inputs too. Loading names the
    nodes, takes the weights as constants and fits the IR version: nothing TensorRT's parser reads
    otherwise, but the names TensorRT gives layers differ (they are written into the engine). The
    head start's engine is taken, and a build without one hands TensorRT the file as it is too:
    the same folder, byte for byte. Built from the loaded model instead (no file), or within a
    memory budget (the file is not read whole there), the segment is the same and the engine
    another (those names); the folder runs (emulated) as the model does."""
    model = small_cnn(str(tmp_path / "old.onnx"), old_format=True)
    assert main(["build", model, "-o", str(tmp_path / "head"), *SHAPES]) == 0
    assert spy["started"][0] is not None and spy["claimed"] == spy["started"]
    no_scratch(str(tmp_path))
    without_head_start(monkeypatch)
    assert main(["build", model, "-o", str(tmp_path / "plain"), *SHAPES]) == 0
    assert spy["claimed"][-1] is None
    assert folder(str(tmp_path / "head")) == folder(str(tmp_path / "plain"))
    build(onnx.load(model), str(tmp_path / "proto"), PROFILES)
    head, proto = folder(str(tmp_path / "head")), folder(str(tmp_path / "proto"))
    assert head["segment_0.onnx"] == proto["segment_0.onnx"]
    assert head["segment_0.engine"] != proto["segment_0.engine"]
    # within a memory budget the file is not read whole: the segment's weights go by address
    build(model, str(tmp_path / "budget"), PROFILES, SessionOptions(max_build_memory=8 << 30))
    assert folder(str(tmp_path / "budget"))["segment_0.engine"] == proto["segment_0.engine"]

    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = Session.load(str(tmp_path / "head"), SessionOptions(emulate=True)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_model_keeping_its_weights_in_a_data_file_takes_it(tmp_path, spy, monkeypatch) -> None:
    """Weights in an external data file (as PyTorch's exporter writes them by default): TensorRT
    reads them beside the file, the head start's engine is taken, and the folder is the one a
    build without a head start writes."""
    model = onnx.load(small_cnn(str(tmp_path / "inline.onnx")))
    path = str(tmp_path / "cnn.onnx")
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="cnn.onnx.data",
              size_threshold=0)
    with open(path, "rb") as f:
        data = f.read()
    assert wire.external_bytes(data, str(tmp_path)) == os.path.getsize(path + ".data") > 0
    assert main(["build", path, "-o", str(tmp_path / "head"), *SHAPES]) == 0
    assert spy["started"][0] is not None and spy["claimed"] == spy["started"]
    no_scratch(str(tmp_path))
    without_head_start(monkeypatch)
    assert main(["build", path, "-o", str(tmp_path / "plain"), *SHAPES]) == 0
    assert folder(str(tmp_path / "head")) == folder(str(tmp_path / "plain"))


def test_external_data_named_outside_the_models_folder_is_not_read(tmp_path) -> None:
    """A location loading refuses (outside the model's folder), or a file that is not there: the
    head start cannot tell the size, and does not build."""
    inner = tmp_path / "m"
    inner.mkdir()
    (tmp_path / "outside.data").write_bytes(bytes(64))
    for location in ("../outside.data", str(tmp_path / "outside.data"), "missing.data"):
        t = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[16], data_location=TensorProto.EXTERNAL)
        t.external_data.add(key="location", value=location)
        graph = helper.make_graph([helper.make_node("Relu", ["w"], ["y"])], "g", [],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])], [t])
        data = helper.make_model(graph).SerializeToString()
        assert wire.external_bytes(data, str(inner)) is None, location


def test_a_file_changed_after_the_head_start_read_it_builds_without_it(tmp_path, spy) -> None:
    """The model file is replaced by another (the same graph, other weights) after the head start
    read it: the engine is built from the file loaded, not taken from the head start."""
    model = small_cnn(str(tmp_path / "cnn.onnx"))
    started = head_start.launch(model, str(tmp_path / "out"), "auto", PROFILES)
    assert started is not None
    started.answer()  # (it has read the file)
    changed = onnx.load(model)
    changed.graph.initializer[0].raw_data = bytes(len(changed.graph.initializer[0].raw_data))
    onnx.save(changed, model + ".new")
    os.replace(model + ".new", model)
    build(model, str(tmp_path / "out"), PROFILES)
    assert spy["claimed"] == [None]
    no_scratch(str(tmp_path))


def test_other_profiles_than_the_head_starts_build_without_it(tmp_path, spy, monkeypatch) -> None:
    model = small_cnn(str(tmp_path / "cnn.onnx"))
    other = [{"x": ((1, 3, 16, 16), (1, 3, 16, 16), (2, 3, 16, 16))}]
    started = head_start.launch(model, str(tmp_path / "head"), "auto", PROFILES)
    assert started is not None and head_start.pending_for(model)
    build(model, str(tmp_path / "head"), other)  # the pending head start is the one asked (no second one)
    assert spy["started"] == [started] and spy["claimed"] == [None]
    assert not head_start.pending_for(model)
    no_scratch(str(tmp_path))
    without_head_start(monkeypatch)
    build(model, str(tmp_path / "plain"), other)
    assert folder(str(tmp_path / "head")) == folder(str(tmp_path / "plain"))


def test_which_command_lines_and_options_start_one(tmp_path) -> None:
    model = small_cnn(str(tmp_path / "cnn.onnx"))
    out = str(tmp_path / "out")
    try:
        assert _head_start.start_from_argv(["build", model, "-o", out, *SHAPES, "--flavor", "tensorrt_rtx"])
        assert head_start.pending_for(model)
    finally:
        head_start.discard()
    no_scratch(str(tmp_path))
    for extra in (["--precision", "fp16"], ["--exclude-ops", "Relu"], ["--workspace-mb", "64"], ["--isolate"],
                  ["--flavor", "none"], ["--shapes", "x:1x3"] + ["--min-shapes", "x:1x3x16x16"]):
        assert not _head_start.start_from_argv(["build", model, "-o", out, *extra]), extra
    assert not _head_start.start_from_argv(["build", str(tmp_path / "missing.onnx"), "-o", out])
    assert head_start.launch(model, out, "auto", PROFILES, BuildOptions(precision="fp16")) is None
    assert head_start.launch(model, out, "auto", PROFILES, BuildOptions(max_build_memory=8 << 30)) is None
    assert not head_start.pending_for(model)


def _six_nodes(path: str, inputs: list[onnx.ValueInfoProto], factor: str) -> str:
    """a + w -> Relu -> * ``factor`` -> Sigmoid -> + w -> Relu, the graph's inputs listed as ``inputs``."""
    w = numpy_helper.from_array(np.full((1, 8), 0.5, np.float32), "w")
    nodes = [helper.make_node(op, ins, [out], name=out)
             for op, ins, out in (("Add", ["a", "w"], "t0"), ("Relu", ["t0"], "t1"), ("Mul", ["t1", factor], "t2"),
                                  ("Sigmoid", ["t2"], "t3"), ("Add", ["t3", "w"], "t4"), ("Relu", ["t4"], "y"))]
    graph = helper.make_graph(nodes, "six", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                              [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _built_alike(path: str, shapes: list[str], out: Any, spy: dict[str, list[Any]],
                 monkeypatch: pytest.MonkeyPatch) -> onnx.ModelProto:
    """``path`` built into ``out``/head taking its head start and into ``out``/plain without one:
    the same folder, byte for byte; the segment model the folder holds."""
    assert main(["build", path, "-o", str(out / "head"), *shapes]) == 0
    assert spy["claimed"] == spy["started"] and spy["started"][0] is not None
    without_head_start(monkeypatch)
    assert main(["build", path, "-o", str(out / "plain"), *shapes]) == 0
    assert folder(str(out / "head")) == folder(str(out / "plain"))
    return onnx.load(str(out / "head" / "segment_0.onnx"))


def test_a_model_listing_its_inputs_otherwise_than_it_reads_them(tmp_path, spy, monkeypatch) -> None:
    """The graph lists ``b`` before ``a`` but reads ``a`` first: a segment holding the whole model
    lists them as the model does (as TensorRT does given the file), so the head start's engine is
    the engine, byte for byte."""
    path = _six_nodes(str(tmp_path / "order.onnx"), [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 8])
                                                     for n in ("b", "a")], "b")
    segment = _built_alike(path, ["--shapes", "a:2x8,b:2x8"], tmp_path, spy, monkeypatch)
    assert [v.name for v in segment.graph.input] == ["b", "a"]


def test_a_model_with_an_input_no_node_reads_takes_it(tmp_path, spy, monkeypatch) -> None:
    """An input no node reads (Paddle2ONNX's LAC lists a ``length`` its GRUs never read): TensorRT's
    parser makes a network input of it and keeps it in the engine, so the segment holding the
    whole model has it too. The planner takes the early parse's answer, the head start's engine
    is the engine, byte for byte, and the folder runs as ONNX Runtime runs the model, fed it."""
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 8]),
              helper.make_tensor_value_info("length", TensorProto.INT64, ["B"])]
    path = _six_nodes(str(tmp_path / "unread.onnx"), inputs, "w")
    segment = _built_alike(path, ["--shapes", "a:2x8,length:1"], tmp_path, spy, monkeypatch)
    assert [v.name for v in segment.graph.input] == ["a", "length"]
    feeds = {"a": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8), "length": np.array([2], np.int64)}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = Session.load(str(tmp_path / "head"), SessionOptions(emulate=True)).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_model_declaring_an_output_shape_its_ops_contradict_takes_it(tmp_path, spy, monkeypatch) -> None:
    """An exporter's graph output declared [1, 5] where the ops compute [N, 8] (torch 1.9's
    exports of ddddocr declare one so): loading keeps the computed shape, which TensorRT's parser
    does not read either (of a graph output it reads the name and element type), so the head
    start's engine is the engine, byte for byte, and the folder declares what the ops compute."""
    path = _six_nodes(str(tmp_path / "declared.onnx"), [helper.make_tensor_value_info("a", TensorProto.FLOAT,
                                                                                      ["N", 8])], "w")
    model = onnx.load(path)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5]))
    onnx.save(model, path)
    segment = _built_alike(path, ["--shapes", "a:2x8"], tmp_path, spy, monkeypatch)
    dims = segment.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 8]


def _paddle_like(path: str, dims: list[Any]) -> str:
    """small_cnn's model with its input's dims declared as Paddle2ONNX declares them (-1, "?")."""
    model = onnx.load(small_cnn(path))
    shape = model.graph.input[0].type.tensor_type.shape
    for d, value in zip(shape.dim, dims):
        d.Clear()
        if isinstance(value, str):
            d.dim_param = value
        else:
            d.dim_value = value
    onnx.save(model, path)
    return path


def test_dims_the_parser_reads_as_dynamic_too_build_from_the_file(tmp_path, spy, monkeypatch) -> None:
    """Loading takes -1 and "?" as unknown dims. Where TensorRT's parser reads the file's dims as
    dynamic too (-1, one "?": PP-OCR's recognisers), the head start's engine is taken and the folder
    is the one a build without it writes. Where it reads them otherwise ("?" for the batch, the
    height and the width: it would hold them equal, and a profile of height 16 and width 24 would
    not build), the file is handed to it with those dims as loading leaves them, by the head start
    and by the build without one alike: the same folder, built at 16x24, run as ONNX Runtime runs
    the model."""
    one = _paddle_like(str(tmp_path / "one.onnx"), [-1, 3, "?", 16])
    many = _paddle_like(str(tmp_path / "many.onnx"), ["?", 3, "?", "?"])
    runs = [(one, ["--shapes", "x:2x3x16x16"]), (many, ["--shapes", "x:2x3x16x24"])]
    for k, (path, shapes) in enumerate(runs):
        assert main(["build", path, "-o", str(tmp_path / f"head{k}"), *shapes]) == 0
        assert spy["claimed"][-1] == spy["started"][-1] and spy["started"][-1] is not None
        no_scratch(str(tmp_path))
    without_head_start(monkeypatch)
    for k, (path, shapes) in enumerate(runs):
        assert main(["build", path, "-o", str(tmp_path / f"plain{k}"), *shapes]) == 0
        assert folder(str(tmp_path / f"head{k}")) == folder(str(tmp_path / f"plain{k}"))
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 24)).astype(np.float32)
    want = ort.InferenceSession(many, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = Session.load(str(tmp_path / "head1"), SessionOptions(emulate=True)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_engine_from_the_cache_leaves_no_head_start_behind(tmp_path, spy) -> None:
    """The second build differs only in an option the engine does not depend on: its engine comes
    from the engine cache, and the head start it claimed is removed all the same."""
    model = small_cnn(str(tmp_path / "cnn.onnx"))
    cache = str(tmp_path / "cache")
    build(model, str(tmp_path / "first"), PROFILES, SessionOptions(cache_dir=cache))
    second = build(model, str(tmp_path / "second"), PROFILES, SessionOptions(cache_dir=cache, max_memory="8G"))
    assert second["build_cache"]["hit"] is False  # the folder was built, its engine taken from the cache
    assert len(spy["claimed"]) == 2 and all(c is not None for c in spy["claimed"])
    no_scratch(str(tmp_path))
    with open(tmp_path / "first" / "segment_0.engine", "rb") as a, open(tmp_path / "second" / "segment_0.engine",
                                                                         "rb") as b:
        assert a.read() == b.read()


_HOLD = """
import sys, threading
from trt_backend.commands import _args
from trt_backend.tensorrt import flavor
held = threading.Event()

def hold():  # as the head start's thread does while TensorRT parses and builds
    with flavor.native_stderr():
        held.set()
        threading.Event().wait(30)

check = _args.check_output_paths

def check_while_held(args):
    threading.Thread(target=hold, daemon=True).start()
    held.wait(10)
    return check(args)

_args.check_output_paths = check_while_held
"""


@pytest.mark.parametrize("entry", ["from trt_backend.cli import main as run",
                                   "from trt_backend.cli import script_main as run"])
def test_an_error_while_a_build_thread_holds_stderr_is_said(tmp_path, entry) -> None:
    """While TensorRT builds, a thread points descriptor 2 at a scratch file (its native prints go
    to the debug log); an error the command meets meanwhile is still said on stderr, by ``main``
    as by the script's ``script_main`` (with ``main`` it was lost: exit 1, nothing printed)."""
    import subprocess
    import sys

    model = small_cnn(str(tmp_path / "cnn.onnx"))
    existing = tmp_path / "existing.txt"
    existing.write_text("x")
    code = (f"{_HOLD}\n{entry}\nsys.argv[1:] = {['build', model, '-o', str(existing), *SHAPES]!r}\n"
            "sys.exit(run())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"trt-backend: error: cannot write -o {existing}: exists and is not a folder"


def test_build_refuses_shapes_beside_ranges(tmp_path, capsys) -> None:
    """``build --shapes`` with ``--min/--opt/--max-shapes``: one line (``--shapes`` was dropped
    silently, and a run at its shape then fell outside the folder's profile); nothing written."""
    model = small_cnn(str(tmp_path / "cnn.onnx"))
    out = tmp_path / "b"
    assert main(["build", model, "-o", str(out), "--shapes", "x:2x3x16x16", "--min-shapes", "x:1x3x16x16",
                 "--opt-shapes", "x:1x3x16x16", "--max-shapes", "x:1x3x16x16"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("trt-backend: error: --shapes builds one fixed profile") and "\n" not in err
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".head-start-")]


FORKS = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2


def _two_nodes(path: str) -> str:
    """Add then Relu: TensorRT takes it whole, the partition's minimum segment size does not."""
    nodes = [helper.make_node("Add", ["x", "x"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])
    two = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    two.ir_version = 8
    onnx.save(two, path)
    return path


BUILDS = """
import sys
from trt_backend.cli import main
rc = main(sys.argv[1:])
print("TENSORRT_IMPORTED", "tensorrt_rtx" in sys.modules)
sys.exit(rc)
"""


@pytest.mark.skipif(not FORKS, reason="a head start is forked only with a second CPU")
@pytest.mark.parametrize("whole", [True, False])
def test_the_build_command_builds_its_head_start_in_a_child_process(whole, tmp_path, monkeypatch) -> None:
    """``trt-backend build`` forks its head start (it runs one thread at its start); the folder is
    byte for byte the one built here without a head start, where the child's engine is taken
    (``whole``) and where the plan leaves it (a model below the minimum segment size: the child is
    ended, its scratch gone)."""
    import subprocess
    import sys

    if whole:
        model, shapes = small_cnn(str(tmp_path / "cnn.onnx")), SHAPES
    else:
        model, shapes = _two_nodes(str(tmp_path / "two.onnx")), ["--min-shapes", "x:1x8", "--opt-shapes", "x:2x8",
                                                                 "--max-shapes", "x:4x8"]
    proc = subprocess.run([sys.executable, "-c", BUILDS, "-vv", "build", model, "-o", str(tmp_path / "cli"),
                           *shapes], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "built in child process" in proc.stderr
    # the TensorRT the child imported, as it described it: this process imported none (the
    # manifest's versions, targets and features compared below all came from the description)
    assert "describes it (not imported here)" in proc.stderr and "TENSORRT_IMPORTED False" in proc.stdout
    assert "came from its early parse" in proc.stderr  # (the child's answer, its first message)
    assert ("engine built from the model file as it is" in proc.stderr) == whole
    no_scratch(str(tmp_path))
    without_head_start(monkeypatch)
    assert main(["build", model, "-o", str(tmp_path / "here"), *shapes]) == 0
    assert folder(str(tmp_path / "cli")) == folder(str(tmp_path / "here"))


STARTS = """
import sys
from trt_backend.commands import _head_start
from trt_backend.engines import head_start
started = _head_start.start_from_argv(sys.argv[1:])
loaded = sorted(sys.modules)
head_start.discard()
print("STARTED", started, ",".join(loaded))
"""


@pytest.mark.skipif(not FORKS, reason="a head start is forked only with a second CPU")
def test_the_head_start_forks_before_the_build_loads_its_own_modules(tmp_path) -> None:
    """The child begins before this process loads what only the build uses (TensorRT and the
    modules that wrap it, the build's options, the build cache, onnx, numpy): the child loads what
    it needs itself, beside this process."""
    import subprocess
    import sys

    model = small_cnn(str(tmp_path / "cnn.onnx"))
    proc = subprocess.run([sys.executable, "-c", STARTS, "build", model, "-o", str(tmp_path / "out"), *SHAPES],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, started, loaded = next(ln for ln in proc.stdout.splitlines() if ln.startswith("STARTED")).split(" ", 2)
    assert started == "True"
    unwanted = {"onnx", "numpy", "tensorrt_rtx", "trt_backend.engines.options", "trt_backend.engines.config",
                "trt_backend.tensorrt.flavor", "trt_backend.tensorrt.questions", "trt_backend.artifacts.build_cache",
                "trt_backend.commands._build_hit", "partitioner.wire"}
    assert unwanted & set(loaded.split(",")) == set()
    no_scratch(str(tmp_path))


def test_a_ctrl_c_as_the_head_start_begins_leaves_nothing_of_it(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C while the head start's thread starts: the build ends with it (the command line
    says "interrupted"), and neither its scratch folder nor the build's is left."""
    path, out = str(tmp_path / "cnn.onnx"), str(tmp_path / "built")
    small_cnn(path)
    refuse_to_start(monkeypatch, "head-start-build", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        build(path, out, PROFILES)
    assert sorted(os.listdir(tmp_path)) == ["cnn.onnx"]
    assert main(["build", path, "-o", out, *SHAPES]) == 130
    assert sorted(os.listdir(tmp_path)) == ["cnn.onnx"]


def test_no_thread_for_the_head_start_builds_without_one(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No thread to be had for the head start (a container's limit on processes): it is only a
    head start, and the build is the same folder, its engine built by the compile path."""
    path = str(tmp_path / "cnn.onnx")
    small_cnn(path)
    refuse_to_start(monkeypatch, "head-start-build", RuntimeError("can't start new thread"))
    manifest = build(path, str(tmp_path / "built"), PROFILES)
    assert [s["backend"] for s in manifest["segments"]] == ["tensorrt"]
    assert sorted(os.listdir(tmp_path)) == ["built", "cnn.onnx"]
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = Session.load(str(tmp_path / "built")).run(None, {"x": x})
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-5)
