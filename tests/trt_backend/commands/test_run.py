"""``trt-backend run`` end to end: random or given inputs, outputs written, executors shown, saved
plans reused, and user errors as one line with exit code 1."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.support.graphs import ort_reference
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH, demo_model

pytestmark = pytest.mark.usefixtures("oracle")  # needs a TensorRT parser


def test_run_random_inputs_prints_outputs_and_executors(capsys) -> None:
    assert main(["run", DEMO_PATH, "--shapes", "image:2x3x32x32", "--emulate"]) == 0
    out = capsys.readouterr().out
    assert "3 segment(s)" in out
    assert "segment 0: tensorrt    executor emulated" in out and "segment 1: onnxruntime executor onnxruntime" in out
    assert "image: shape (2, 3, 32, 32) float32" in out
    assert "probs: shape (2, 10) float32  min" in out and "top_classes: shape (2, 3) int64" in out
    assert "executors: emulated x2, onnxruntime x1" in out
    assert "ONNX Runtime CPU sessions: a thread pool each, an arena each" in out


def test_run_on_one_global_pool_and_shared_arena_gives_the_same_outputs(tmp_path) -> None:
    # a child process: the global pool is a one-way switch of the whole process
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", image=x)
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "run", DEMO_PATH, "--shapes", "image:2x3x32x32",
                           "--emulate", "--thread-pool", "global", "--share-arena", "--inputs",
                           str(tmp_path / "in.npz"),
                           "--outputs", str(tmp_path / "out.npz")], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "executors: emulated x2, onnxruntime x1" in proc.stdout
    assert "ONNX Runtime CPU sessions: one global thread pool, one shared arena" in proc.stdout
    got = np.load(tmp_path / "out.npz")
    for name, ref in zip(["probs", "top_scores", "top_classes"], ort_reference(demo_model(), {"image": x})):
        np.testing.assert_allclose(got[name], ref, atol=1e-5)


def test_run_given_inputs_writes_outputs_equal_to_onnxruntime(tmp_path, capsys) -> None:
    x = np.random.default_rng(3).standard_normal((3, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", image=x)
    rc = main(["run", DEMO_PATH, "--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32",
               "--max-shapes", "image:4x3x32x32", "--inputs", str(tmp_path / "in.npz"),
               "--outputs", str(tmp_path / "out.npz"), "--plan-json", str(tmp_path / "plan.json"), "--emulate"])
    assert rc == 0
    got = np.load(tmp_path / "out.npz")
    for name, ref in zip(["probs", "top_scores", "top_classes"], ort_reference(demo_model(), {"image": x})):
        np.testing.assert_allclose(got[name], ref, atol=1e-5)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["segments"][0]["profiles"][0]["image"]["max"] == [4, 3, 32, 32]
    assert f"wrote {tmp_path / 'out.npz'} (3 output(s))" in capsys.readouterr().out
    # the saved plan's profiles serve a second run with no profile given
    assert main(["run", DEMO_PATH, "--saved-plan", str(tmp_path / "plan.json"), "--emulate"]) == 0
    assert "image: shape (2, 3, 32, 32)" in capsys.readouterr().out  # random inputs at the opt shapes


def test_auto_emulation_is_the_default_and_warns(capsys) -> None:
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "run", DEMO_PATH, "--shapes", "image:1x3x32x32"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "emulated through ONNX Runtime" in warnings[0]


@pytest.mark.parametrize("args, message", [
    ([], "input 'image' has dynamic shape ['batch', 3, 32, 32] and no profile gives one"),
    (["--shapes", "image=1x3x32x32"], "cannot read shapes 'image=1x3x32x32'"),
    (["--shapes", "pixels:1x3x32x32"], "profile 0: 'pixels' is not a model input (inputs: image)"),
    (["--shapes", "image:1x3x32x32", "--min-shapes", "image:1x3x32x32"],
     "give --min-shapes, --opt-shapes and --max-shapes together"),
    (["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:4x3x32x32",
      "--shapes", "image:8x3x32x32"], "input 'image': shape (8, 3, 32, 32) is outside every profile"),
    (["--shapes", "image:1x3x32x32", "--inputs", "/no/such.npz"], "--inputs /no/such.npz: no such file"),
])
def test_user_errors_are_one_line_and_exit_1(capsys, args, message) -> None:
    assert main(["run", DEMO_PATH, "--emulate", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("trt-backend: error: ") and message in err and "\n" not in err


def test_wrong_inputs_file_and_changed_plan(tmp_path, capsys) -> None:
    np.savez(tmp_path / "in.npz", img=np.zeros((1, 3, 32, 32), np.float32))
    assert main(["run", DEMO_PATH, "--shapes", "image:1x3x32x32", "--inputs", str(tmp_path / "in.npz"),
                 "--emulate"]) == 1
    assert "unknown input 'img'" in capsys.readouterr().err
    assert main(["run", DEMO_PATH, "--shapes", "image:1x3x32x32", "--plan-json", str(tmp_path / "p.json"),
                 "--emulate"]) == 0
    capsys.readouterr()
    assert main(["run", DEMO_PATH, "--saved-plan", str(tmp_path / "p.json"), "--exclude-ops", "Gemm", "--emulate"]) == 1
    assert "changed since its profiles were derived" in capsys.readouterr().err


def test_a_shape_larger_than_memory_is_one_line(capsys) -> None:
    """--shapes x:20000000x3x32x32 asks for 229 GiB of input: one line naming the tensor, the
    shape and both sizes, exit 1 (it was numpy's allocation error, or an out-of-memory kill)."""
    from trt_backend.ort.sizes import available_memory

    have = available_memory()
    if have is None:
        pytest.skip("no /proc/meminfo: this platform does not say what memory is available")
    rows = 2 * have // (3 * 32 * 32 * 4)  # twice what is available (never allocated: refused first)
    assert main(["run", DEMO_PATH, "--shapes", f"image:{rows}x3x32x32", "--emulate"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "image" in err[0] and f"({rows}, 3, 32, 32)" in err[0]
    assert "GiB" in err[0] and "available" in err[0]


def test_demo_out_that_is_a_file_is_one_line(tmp_path, capsys) -> None:
    existing = tmp_path / "a_file"
    existing.write_text("x")
    assert main(["demo", "--out", str(existing)]) == 1
    assert (capsys.readouterr().err.strip()
            == f"trt-backend: error: cannot write --out {existing}: exists and is not a folder")


def test_a_sequence_of_maps_is_named_as_such() -> None:
    from trt_backend.commands.run import stats_line

    assert stats_line([{0: 0.5, 1: 0.5}, {0: 0.2, 1: 0.8}]) == "sequence of 2 map(s)"
    assert stats_line([np.zeros(2), np.ones(3)]) == "sequence of 2 tensor(s)"
    assert stats_line({"a": 1.0}) == "map of 1 entry"


def test_a_kernel_failure_is_one_line_not_also_onnx_runtimes_log(tmp_path, capfd) -> None:
    """An index out of range fails ONNX Runtime's Gather: our one line says so, and ONNX Runtime's
    own red log line of the same failure (written to the process's stderr) is not printed too."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    graph = h.make_graph([h.make_node("Gather", ["table", "ids"], ["y"], name="lookup")], "g",
                         [h.make_tensor_value_info("ids", T.INT64, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])],
                         [nh.from_array(np.zeros(3, np.float32), "table")])
    path = str(tmp_path / "gather.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    np.savez(tmp_path / "ids.npz", ids=np.array([0, 9], np.int64))
    assert main(["-q", "run", path, "--inputs", str(tmp_path / "ids.npz"), "--emulate"]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trt-backend: error: segment 0") and "out of data bounds" in err[0]


def test_inputs_without_shapes_give_one_profile_at_run_compare_and_build_alike(tmp_path, capsys) -> None:
    """Samples of different shapes in a folder and no shapes: run, compare and build (plain and
    --precision auto) each take one profile spanning them; build refused before ("no profile
    gives one")."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["wav"], ["y"])], "audio",
                              [helper.make_tensor_value_info("wav", TensorProto.FLOAT, ["B", "N"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "N"])])
    path = str(tmp_path / "audio.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    samples = tmp_path / "samples"
    samples.mkdir()
    rng = np.random.default_rng(0)
    for k, shape in enumerate([(1, 4000), (3, 16000)]):
        np.savez(samples / f"{k}.npz", wav=rng.standard_normal(shape).astype(np.float32))
    assert main(["compare", path, "--inputs", str(samples)]) == 0
    for extra in ([], ["--precision", "auto"]):
        folder = tmp_path / f"built{len(extra)}"
        assert main(["build", path, "-o", str(folder), "--inputs", str(samples), *extra]) == 0
        with open(folder / "manifest.json") as f:
            (profile,) = json.load(f)["plan"]["input_profiles"]
        assert (profile["wav"]["min"], profile["wav"]["max"]) == ([1, 4000], [3, 16000])
        assert main(["run", str(folder), "--inputs", str(samples / "1.npz")]) == 0


def test_a_saved_plan_of_another_model_says_so(tmp_path, capsys) -> None:
    """--saved-plan written for one model, given with another: the error names the model the plan
    was made for (it spoke of "the plan changed" and listed every node index of both)."""
    import onnx
    from onnx import TensorProto, helper

    other = str(tmp_path / "other.onnx")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "other",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), other)
    plan = str(tmp_path / "p.json")
    assert main(["run", other, "--plan-json", plan, "--emulate"]) == 0
    capsys.readouterr()
    assert main(["run", DEMO_PATH, "--saved-plan", plan, "--emulate"]) == 1
    err = capsys.readouterr().err.strip()
    assert f"the saved plan was made for {other} (fingerprint " in err and f"not for {DEMO_PATH}" in err, err
    assert "\n" not in err
    # The same file named another way, changed since: the plan is of this model, which changed.
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "other",
                                                  list(graph.input), list(graph.output)),
                                opset_imports=[helper.make_opsetid("", 17)]), other)
    relative = os.path.relpath(other)
    assert main(["run", relative, "--saved-plan", plan, "--emulate"]) == 1
    err = capsys.readouterr().err.strip()
    assert "changed since its profiles were derived" in err and "made for" not in err, err
