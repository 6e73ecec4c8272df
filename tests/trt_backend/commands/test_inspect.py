"""``trt-backend inspect`` and ``demo`` end to end: real planning, real files, clean failures."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from tests.helpers import model, vi
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH, demo_model

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser


def test_bundled_demo_file_matches_its_generator() -> None:
    assert onnx.load(DEMO_PATH).SerializeToString() == demo_model().SerializeToString()


def test_inspect_demo_writes_everything(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["inspect", DEMO_PATH, "--json", str(out / "plan.json"), "--export-segments", str(out / "segs"),
               "--annotated", str(out / "annotated.onnx"), "--picture", str(out / "plan.svg")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "3 segments (2 TensorRT, 1 ONNX Runtime)" in text
    assert "Resize      1  TensorRT parser: UNSUPPORTED_NODE: TensorRT only supports half_pixel" in text
    plan = json.loads((out / "plan.json").read_text())
    assert [(s["backend"], s["nodes"]) for s in plan["segments"]] == [
        ("tensorrt", [0, 1, 2, 3]), ("onnxruntime", [4]), ("tensorrt", [5, 6, 7, 8, 9, 10, 11])]
    assert plan["tensorrt"].startswith("tensorrt")
    assert plan["nodes"][4] == {"index": 4, "name": "crop_resize", "op_type": "Resize", "segment": 1,
                                "verdict": "onnxruntime", "reason": plan["nodes"][4]["reason"]}
    # the segments chain back into the whole model's numbers
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    values = {"image": x}
    for seg in plan["segments"]:
        sess = ort.InferenceSession(str(out / "segs" / f"segment_{seg['id']}.onnx"), providers=["CPUExecutionProvider"])
        values.update(zip(seg["outputs"], sess.run(seg["outputs"], {k: values[k] for k in seg["inputs"]})))
    whole = ort.InferenceSession(DEMO_PATH, providers=["CPUExecutionProvider"]).run(None, {"image": x})
    np.testing.assert_allclose(values["probs"], whole[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(values["top_classes"], whole[2])
    annotated = onnx.load(str(out / "annotated.onnx"))
    props = {p.key: p.value for p in annotated.graph.node[4].metadata_props}
    assert props["trt_backend.segment"] == "1" and props["trt_backend.backend"] == "onnxruntime"
    svg = ET.parse(str(out / "plan.svg")).getroot()
    assert svg.tag.endswith("svg")


def test_inspect_options_change_the_plan(tmp_path, capsys) -> None:
    plan_path = tmp_path / "p.json"
    assert main(["inspect", DEMO_PATH, "--exclude-ops", "Softmax", "--min-segment-size", "1",
                 "--json", str(plan_path)]) == 0
    plan = json.loads(plan_path.read_text())
    assert [s["backend"] for s in plan["segments"]] == ["tensorrt", "onnxruntime", "tensorrt", "onnxruntime",
                                                         "tensorrt"]
    assert plan["nodes"][10]["reason"] == "excluded by user (op type Softmax)"


def test_inspect_isolated_matches_in_process(tmp_path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["inspect", DEMO_PATH, "--json", str(a)]) == 0
    assert main(["inspect", DEMO_PATH, "--json", str(b), "--isolate"]) == 0
    assert a.read_text() == b.read_text()


def bad_models(tmp_path) -> dict[str, tuple[str, str]]:
    """name -> (path, expected message fragment)."""
    cases: dict[str, tuple[str, str]] = {}
    data = open(DEMO_PATH, "rb").read()
    (tmp_path / "truncated.onnx").write_bytes(data[: len(data) // 3])
    cases["truncated"] = (str(tmp_path / "truncated.onnx"), "not an ONNX model or truncated")
    (tmp_path / "text.onnx").write_text("hello")
    cases["not onnx"] = (str(tmp_path / "text.onnx"), "not an ONNX model")
    cases["missing"] = (str(tmp_path / "missing.onnx"), "no such file")
    cyc = model([helper.make_node("Add", ["x", "b"], ["a"], name="p"), helper.make_node("Relu", ["a"], ["b"], name="q"),
                 helper.make_node("Relu", ["a"], ["y"], name="r")], [vi("x", [4])], [vi("y", [4])])
    onnx.save(cyc, str(tmp_path / "cycle.onnx"))
    cases["cycle"] = (str(tmp_path / "cycle.onnx"), "cycle through nodes 0 'p' (Add), 1 'q' (Relu)")
    dup = model([helper.make_node("Relu", ["x"], ["t"], name="a"), helper.make_node("Relu", ["x"], ["t"], name="b"),
                 helper.make_node("Relu", ["t"], ["y"], name="c")], [vi("x", [4])], [vi("y", [4])])
    onnx.save(dup, str(tmp_path / "dup.onnx"))
    cases["duplicate"] = (str(tmp_path / "dup.onnx"), "tensor 't' is produced twice")
    onnx.save(model([], [vi("x", [4])], [vi("x", [4])]), str(tmp_path / "empty.onnx"))
    cases["empty"] = (str(tmp_path / "empty.onnx"), "the graph has no nodes")
    ext = demo_model()
    onnx.save(ext, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.bin", size_threshold=0)
    os.remove(tmp_path / "ext.bin")
    cases["external"] = (str(tmp_path / "ext.onnx"), "external data file 'ext.bin'")
    return cases


def test_bad_inputs_fail_in_one_line_and_write_nothing(tmp_path, capsys) -> None:
    outdir = tmp_path / "out"
    outdir.mkdir()
    for name, (path, fragment) in bad_models(tmp_path).items():
        rc = main(["inspect", path, "--json", str(outdir / "p.json"), "--picture", str(outdir / "p.html"),
                   "--annotated", str(outdir / "a.onnx"), "--export-segments", str(outdir / "segs")])
        err = capsys.readouterr().err
        assert rc == 1, name
        assert err.startswith("trt-backend: error: ") and err.count("\n") == 1, (name, err)
        assert fragment in err, (name, err)
    assert main(["inspect", DEMO_PATH, "--exclude-ops", "NoSuchOp", "--json", str(outdir / "p.json")]) == 1
    assert "unknown op type 'NoSuchOp'" in capsys.readouterr().err
    assert main(["inspect", DEMO_PATH, "--picture", str(outdir / "p.png")]) == 1
    assert "use a .svg or .html" in capsys.readouterr().err
    assert main(["inspect", DEMO_PATH, "--json", str(tmp_path / "no" / "such" / "p.json")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert sorted(os.listdir(outdir)) == []


def test_cli_process_prints_no_traceback(tmp_path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "inspect", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("trt-backend: error: ") and len(proc.stderr.strip().splitlines()) == 1


def test_demo_command(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 segments (2 TensorRT, 1 ONNX Runtime)" in text
    assert "max |probs difference| 0.00e+00, same top classes: True" in text
    assert json.loads((out / "plan.json").read_text())["segments"][1]["backend"] == "onnxruntime"
    build = sorted(os.listdir(out / "build"))
    assert build == ["manifest.json", "model.onnx", "segment_0.engine", "segment_0.onnx", "segment_1.onnx",
                     "segment_2.engine", "segment_2.onnx"]


def probe_needs_profile_shapes() -> onnx.ModelProto:
    """x [1, W] reshaped to [-1, 4] through a shape Tile makes (so shape inference knows no rank
    after it), then MatMul -> Relu -> Relu. The Reshape runs on ONNX Runtime (excluded), so its
    output is a TensorRT segment's input whose type only a probe run can learn; at the probe's
    default widths 2 and 3 the Reshape fails, at a width the profiles give (8) it runs."""
    from onnx import TensorProto as T
    from onnx import numpy_helper as nh

    inits = [nh.from_array(np.array([0], np.int64), "zero"), nh.from_array(np.array([-1, 4], np.int64), "tail"),
             nh.from_array(np.eye(4, dtype=np.float32), "w")]
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0, name="batch"),
             helper.make_node("Div", ["b", "b"], ["reps"], name="reps"),
             helper.make_node("Tile", ["tail", "reps"], ["newshape"], name="tile"),
             helper.make_node("Reshape", ["x", "newshape"], ["r"], name="reshape"),
             helper.make_node("MatMul", ["r", "w"], ["m"], name="matmul"),
             helper.make_node("Relu", ["m"], ["a"], name="relu0"),
             helper.make_node("Relu", ["a"], ["y"], name="relu1")]
    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", T.FLOAT, [1, "W"])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def plans(tmp_path) -> tuple[dict, dict, dict]:
    """The plans inspect wrote at the shapes given (at.json) and without them (default.json), and
    the plan of the build folder ``b``."""
    with open(tmp_path / "at.json") as f:
        at = json.load(f)
    with open(tmp_path / "default.json") as f:
        default = json.load(f)
    with open(tmp_path / "b" / "manifest.json") as f:
        built = json.load(f)["plan"]
    return at, default, built


def test_inspect_at_the_profile_shapes_plans_what_build_builds(tmp_path, capsys) -> None:
    """inspect takes --shapes as build does, so its probe runs where the model runs and its plan is
    the build's; without them the probe fails at its default dims and the MatMul, reading a tensor
    of unknown type, stays on ONNX Runtime in inspect's plan only."""
    path = str(tmp_path / "m.onnx")
    onnx.save(probe_needs_profile_shapes(), path)
    common = ["--exclude-nodes", "reshape", "--min-segment-size", "1"]

    def verdicts(plan: dict) -> dict[str, str]:
        return {n["name"]: n["verdict"] for n in plan["nodes"]}

    assert main(["inspect", path, *common, "--shapes", "x:1x8", "--json", str(tmp_path / "at.json")]) == 0
    assert main(["inspect", path, *common, "--json", str(tmp_path / "default.json")]) == 0
    assert main(["build", path, *common, "--shapes", "x:1x8", "-o", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    at, default, built = plans(tmp_path)
    assert verdicts(at) == verdicts(built) and verdicts(at)["matmul"] == "tensorrt"
    assert verdicts(default)["matmul"] == "onnxruntime"


@pytest.mark.usefixtures("flavor")
def test_export_segments_of_a_folder_writes_them_as_built(tmp_path, capsys) -> None:
    """``inspect DIR --export-segments`` writes the segment models the folder's engines were built
    from (fp16: its casts; its weights in the folder's data file, copied beside), not the segments
    as planned (fp32) that it wrote before; each runs in ONNX Runtime as the folder's emulation does."""
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((256, 128)).astype(np.float32) * 0.1, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "big", [vi("x", ["N", 256])], [vi("y", ["N", 128])], [w])
    path, folder, out = str(tmp_path / "big.onnx"), str(tmp_path / "b"), str(tmp_path / "segs")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    assert main(["build", path, "-o", folder, "--shapes", "x:4x256", "--precision", "fp16"]) == 0
    assert main(["inspect", folder, "--export-segments", out]) == 0
    capsys.readouterr()
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    [seg] = manifest["segments"]
    with open(os.path.join(out, "segment_0.onnx"), "rb") as a, open(os.path.join(folder, seg["model"]), "rb") as b:
        assert a.read() == b.read()
    exported = onnx.load(os.path.join(out, "segment_0.onnx"))  # (its external weights found beside it)
    assert any(n.op_type == "Cast" for n in exported.graph.node)
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    sess = ort.InferenceSession(os.path.join(out, "segment_0.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x})
    from trt_backend.session.options import SessionOptions
    from trt_backend.session.session import Session

    want = Session.load(folder, SessionOptions(emulate=True)).run(None, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shapes, message", [
    ("imagez:1x3x32x32", "profile 0: 'imagez' is not a model input (inputs: image)"),
    ("image:1x3x32", "profile 0, input 'image': expected rank 4"),
])
def test_inspect_refuses_shapes_that_build_and_run_refuse(tmp_path, capsys, shapes, message) -> None:
    """The same --shapes, the same one-line error and exit status from inspect, build and run
    (inspect planned with a misspelt input name and said nothing)."""
    answers = []
    for command in (["inspect", DEMO_PATH], ["build", DEMO_PATH, "-o", str(tmp_path / "b")], ["run", DEMO_PATH]):
        rc = main([*command, "--shapes", shapes])
        err = capsys.readouterr().err.strip().splitlines()
        answers.append((rc, err[-1]))
    assert answers[0][0] != 0 and len(set(answers)) == 1 and message in answers[0][1], answers
    assert not os.path.exists(tmp_path / "b")


def test_inspect_of_a_model_says_a_build_can_still_demote(capsys) -> None:
    """inspect plans with the parser alone; where the builder refuses a node the parser took, a
    build differs (a Loop, NonMaxSuppression on TensorRT-RTX): the output says so, once."""
    assert main(["inspect", DEMO_PATH]) == 0
    out = capsys.readouterr().out
    assert out.count("note: planned by TensorRT's parser; its builder can still refuse a node") == 1


@pytest.mark.usefixtures("flavor")
def test_inspect_and_build_size_boundaries_at_the_shapes_given(tmp_path, capsys) -> None:
    """Twelve element-wise nodes between two excluded Sins on [N, 1024, 16]: at N's stand-in 8 the
    group does not pay for its two hand-overs, at N = 128 (--shapes) it does; inspect plans, and
    says, what the build at those shapes builds."""
    nodes = [helper.make_node("Sin", ["x"], ["a"], name="sin_in")]
    prev = "a"
    for k in range(12):
        nodes.append(helper.make_node("Relu" if k % 2 == 0 else "Neg", [prev], [f"l{k}"], name=f"light{k}"))
        prev = f"l{k}"
    nodes.append(helper.make_node("Sin", [prev], ["y"], name="sin_out"))
    path = str(tmp_path / "m.onnx")
    onnx.save(model(nodes, [vi("x", ["N", 1024, 16])], [vi("y", ["N", 1024, 16])]), path)
    common = ["--exclude-ops", "Sin", "--flavor", "tensorrt_rtx"]

    def backends(plan: dict) -> list[str]:
        return [s["backend"] for s in plan["segments"]]

    assert main(["inspect", path, *common, "--json", str(tmp_path / "default.json")]) == 0
    assert "Boundaries: 0 tensors" in capsys.readouterr().out
    line = "Boundaries: 2 tensors handed between segments per run, 16.8 MB (at the shapes given: N=128)"
    assert main(["inspect", path, *common, "--shapes", "x:128x1024x16", "--json", str(tmp_path / "at.json")]) == 0
    assert line in capsys.readouterr().out
    for cached in (False, True):  # the plan cache's plan is priced as it was planned
        cache = ["--cache-dir", str(tmp_path / "cache")]
        assert main(["inspect", path, *common, "--shapes", "x:128x1024x16", *cache]) == 0
        out = capsys.readouterr().out
        assert line in out and ("plan from the plan cache" in out) == cached
    assert main(["build", path, *common, "--shapes", "x:128x1024x16", "-o", str(tmp_path / "b")]) == 0
    at, default, built = plans(tmp_path)
    assert backends(default) == ["onnxruntime"]
    assert backends(at) == backends(built) == ["onnxruntime", "tensorrt", "onnxruntime"]
    # the folder records the sizes it priced boundaries at (inspect DIR says what inspect said), and
    # opens with the options it was built with
    with open(tmp_path / "b" / "manifest.json") as f:
        assert json.load(f)["build"]["partition"]["boundary_cost"]["dims"] == [["N", 128]]
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert line in text
    assert "3 segments (1 TensorRT, 2 ONNX Runtime) | the plan as built" in text
    from partitioner import PartitionOptions
    from trt_backend import Session, SessionOptions

    options = SessionOptions(partition=PartitionOptions(exclude_ops=("Sin",)), flavor="tensorrt_rtx", emulate=True)
    Session(str(tmp_path / "b"), options=options).close()
    # the Python door plans the same at the same profile, and without it as inspect does without --shapes
    profile = [{"x": ((128, 1024, 16),) * 3}]
    assert backends(Session.make_plan(path, options, profile).to_dict()) == backends(built)
    assert backends(Session.make_plan(path, options).to_dict()) == backends(default)



@pytest.mark.usefixtures("flavor")
def test_feature_maps_are_sized_at_the_image_shape_given(tmp_path, capsys) -> None:
    """A detector's feature maps follow its image's height and width, which the model leaves
    symbolic: shape inference leaves their sizes unknown, and each unknown dim was counted as 64
    (NudeNet at 320x320: 1.37 GB estimated for the 7.9 MB that cross). At the shapes given they are
    sized as inference sizes them there, by inspect of the model and of its build folder alike:
    here the bytes ONNX Runtime computes for the two tensors that cross."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv1"),
             helper.make_node("Sin", ["c1"], ["s"], name="sin"),
             helper.make_node("Conv", ["s", "w2"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv2")]
    path = str(tmp_path / "det.onnx")
    onnx.save(model(nodes, [vi("x", ["N", 3, "H", "W"])], [vi("y", ["N", 4, None, None])], [w1, w2]), path)
    flags = ["--exclude-ops", "Sin", "--flavor", "tensorrt_rtx", "--no-boundary-cost", "--shapes", "x:1x3x64x96"]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    c1 = sess.run(None, {"x": np.zeros((1, 3, 64, 96), np.float32)})[0]
    crossing = 2 * np.zeros((1, 8, 32, 48), np.float32).nbytes  # conv1's output out, the Sin's back
    assert c1.shape == (1, 4, 16, 24)
    line = (f"Boundaries: 2 tensors handed between segments per run, {crossing / 1e3:.3g} kB (at the shapes given, "
            "as shape inference sizes them)")
    assert main(["inspect", path, *flags]) == 0
    assert line in capsys.readouterr().out
    assert main(["build", path, *flags, "-o", str(tmp_path / "b"), "-q"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "b")]) == 0
    assert line in capsys.readouterr().out


def test_verbose_lists_every_boundary_tensor_and_node_on_onnx_runtime_with_its_whole_reason(tmp_path, capsys) -> None:
    """-v promised every demoted node and every boundary tensor; stdout was the same as without it,
    the census's reasons cut at their column."""
    from tests.support.graphs import ml_pipeline_model

    path = str(tmp_path / "pipeline.onnx")
    onnx.save(ml_pipeline_model(), path)
    assert main(["inspect", path]) == 0
    plain = capsys.readouterr().out
    assert main(["inspect", path, "-v"]) == 0
    verbose = capsys.readouterr().out
    assert "Nodes on ONNX Runtime" not in plain and "Nodes on ONNX Runtime" in verbose
    assert main(["inspect", path, "--json", str(tmp_path / "plan.json")]) == 0  # (what the lines must say)
    capsys.readouterr()
    with open(tmp_path / "plan.json", encoding="utf-8") as f:
        plan = json.load(f)
    backend = {s["id"]: s["backend"] for s in plan["segments"]}
    on_ort = [n for n in plan["nodes"] if backend[n["segment"]] != "tensorrt"]
    listed = verbose.split("Nodes on ONNX Runtime\n", 1)[1].split("\n\n", 1)[0].splitlines()
    grouped: dict[str, list[str]] = {}
    for n in on_ort:  # each whole reason once, over the nodes it holds for
        grouped.setdefault(f"  {n['reason']}:", []).append(f"    {n['name']} ({n['op_type']})")
    assert listed == [line for reason, nodes in grouped.items() for line in (reason, *nodes)]
    assert any(len(reason) > 120 for reason in grouped)  # (longer than the census's column: whole here)
    cut = ["--no-boundary-cost", "--min-segment-size", "1"]  # (segments on both sides of the ai.onnx.ml nodes)
    assert main(["inspect", path, *cut, "-v"]) == 0
    verbose = capsys.readouterr().out
    crossing = verbose.split("Boundaries: ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert crossing and all(": segment " in line and " -> segment " in line for line in crossing)
    assert len(crossing) == int(verbose.split("Boundaries: ", 1)[1].split(" ", 1)[0])
