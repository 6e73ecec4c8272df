"""What the CLI prints is meant for a person: a failed segment is one line with its reason once
(``-v`` lists its nodes), the fallback census has one row per op with its real refusal first,
boundary tensors are summarized, long steps report progress on stderr, ``-v``/``-q`` go before
or after the subcommand, and every missing profile is named at once with a ``--shapes`` line.
All on real runs: TensorRT-RTX's parser and builder, ONNX Runtime."""
from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.helpers import model, vi
from trt_backend._progress import ProgressHandler, progress
from trt_backend.cli import build_parser, main
from trt_backend.data.demo import DEMO_PATH

pytestmark = pytest.mark.usefixtures("flavor")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _light(name: str) -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"{name}.onnx")


def _cli(*args: str, stderr_tty: bool = False, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``python -m trt_backend ARGS`` in a child process (stderr a pseudo-terminal if asked)."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    if not stderr_tty:
        return subprocess.run([sys.executable, "-m", "trt_backend", *args], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=timeout)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "trt_backend", *args], stdout=subprocess.PIPE, stderr=follower,
                                text=True, env=env, cwd=ROOT)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # (the child closed the terminal)
                break
            if not data:
                break
            chunks.append(data)
        out = proc.stdout.read() if proc.stdout is not None else ""
        rc = proc.wait(timeout)
    finally:
        os.close(leader)
    return subprocess.CompletedProcess(args, rc, out, b"".join(chunks).decode("utf-8", "replace"))


# ------------------------------------------------------------------ -v / -q anywhere

def test_verbosity_flags_go_before_or_after_the_subcommand(capsys) -> None:
    parser = build_parser("inspect")
    for argv, verbose, quiet in ((["inspect", DEMO_PATH], 0, False), (["-v", "inspect", DEMO_PATH], 1, False),
                                 (["inspect", DEMO_PATH, "-v"], 1, False),
                                 (["-v", "inspect", DEMO_PATH, "-vv"], 3, False),
                                 (["inspect", DEMO_PATH, "--quiet"], 0, True), (["-q", "inspect", DEMO_PATH], 0, True)):
        args = parser.parse_args(argv)
        assert (args.verbose + args.verbose_after, args.quiet or args.quiet_after) == (verbose, quiet), argv
    assert main(["inspect", DEMO_PATH, "-q"]) == 0
    assert "3 segments (2 TensorRT, 1 ONNX Runtime)" in capsys.readouterr().out


def test_quiet_silences_warnings_and_verbose_after_the_subcommand_logs() -> None:
    loud = _cli("run", DEMO_PATH, "--shapes", "image:1x3x32x32")
    assert loud.returncode == 0 and "WARNING" in loud.stderr  # (TensorRT segments emulated without a GPU)
    quiet = _cli("run", DEMO_PATH, "--shapes", "image:1x3x32x32", "-q")

    def untimed(text: str) -> str:
        return re.sub(r"\d+\.\d+ (s|ms)\b", "T", text)

    assert quiet.returncode == 0 and quiet.stderr == "" and untimed(quiet.stdout) == untimed(loud.stdout)
    verbose = _cli("inspect", DEMO_PATH, "-v")
    assert verbose.returncode == 0 and "INFO trt_backend.progress: planning " in verbose.stderr


# ------------------------------------------------------------------ demotions: one line per segment

@pytest.fixture(scope="module")
def demoted_build(tmp_path_factory) -> tuple[str, subprocess.CompletedProcess[str]]:
    """SqueezeNet built with no workspace: TensorRT refuses the whole segment (105 nodes) with one
    200-character assertion."""
    out = str(tmp_path_factory.mktemp("refused") / "squeeze")
    report = out + ".json"
    proc = _cli("build", _light("light_squeezenet"), "-o", out, "--workspace-mb", "0", "--report", report)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_a_refused_segment_is_one_line_with_its_reason_once(demoted_build) -> None:
    out, proc = demoted_build
    lines = proc.stdout.splitlines()
    demoted = [ln for ln in lines if ln.startswith(("  demoted", "  (")) and "demoted" in ln]
    assert len(demoted) == 2, proc.stdout
    assert re.match(r"^  demoted 105 nodes of segment 0 \(round 1: ConstantOfShape x39, Conv x26, Relu x26, .*\) "
                    r"to ONNX Runtime: TensorRT build failed: .*workspace", demoted[0])
    assert demoted[0].count("maxScratchSize") == 1
    assert demoted[1] == "  (105 demoted node(s) in all; -v lists them)"
    assert proc.stderr.count("maxScratchSize") == 1  # (the one warning of the failed build, not TensorRT's log again)
    report = json.load(open(out + ".json"))
    assert [s["backend"] for s in report["segments"]] == ["onnxruntime"] and report["segments"][0]["nodes"] == 105
    (group,) = report["demoted"]
    assert group["segment"] == 0 and group["round"] == 1 and len(group["nodes"]) == 105
    assert "workspace" in group["reason"] and {"node", "name", "op_type"} == set(group["nodes"][0])


def _refused_build(path: str, out: str, shapes: str) -> str:
    """``trt-backend build path -o out --shapes shapes`` refused: exit 1, no traceback, no folder;
    its last line (the error)."""
    proc = _cli("build", path, "-o", out, "--shapes", shapes)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not os.path.exists(out)
    return proc.stderr.strip().splitlines()[-1]


def _refused_past_its_rows(proto: onnx.ModelProto, tmp_path, name: str, shapes: str) -> tuple[str, str, str]:
    """``proto`` saved as ``name``.onnx and built at ``shapes``: refused (see :func:`_refused_build`)
    with ONNX Runtime's error of indices past their rows; (model path, folder path, the error line)."""
    path, out = str(tmp_path / f"{name}.onnx"), str(tmp_path / name)
    onnx.save(proto, path)
    last = _refused_build(path, out, shapes)
    assert "out of data bounds" in last, last
    return path, out, last


def reshape_to_one_row() -> onnx.ModelProto:
    """x [N, 4] -> Relu -> Reshape to a fixed [1, 4] -> Relu -> Relu: it runs at N = 1 only."""
    from onnx import numpy_helper

    nodes = [h.make_node("Relu", ["x"], ["a"], name="relu0"), h.make_node("Reshape", ["a", "s"], ["b"], name="row"),
             h.make_node("Relu", ["b"], ["c"], name="relu1"), h.make_node("Relu", ["c"], ["y"], name="relu2")]
    row = numpy_helper.from_array(np.array([1, 4], np.int64), "s")
    return model(nodes, [vi("x", ["N", 4])], [vi("y", None)], [row])


def test_shapes_the_model_cannot_run_at_are_one_error_not_a_folder_that_fails_every_run(tmp_path) -> None:
    path, out = str(tmp_path / "row.onnx"), str(tmp_path / "row")
    onnx.save(reshape_to_one_row(), path)
    last = _refused_build(path, out, "x:2x4")
    assert last.startswith(f"trt-backend: error: {path}: the model cannot run at the opt shapes of profile 0 (x 2x4): "
                           "TensorRT's builder refused nodes there and ONNX Runtime fails there too (on seeded "
                           "random inputs, as run and compare draw them): ")
    assert "Reshape_1" not in last and "'row'" in last and "{2,4}" in last
    assert not os.path.exists(out) and os.listdir(tmp_path) == ["row.onnx"]  # (nothing half-written)
    # the Python door says the same
    import trt_backend
    from trt_backend.errors import ProfileError

    with pytest.raises(ProfileError, match=r"cannot run at the opt shapes of profile 0 \(x 2x4\)"):
        trt_backend.build(path, out, profiles=[{"x": ((2, 4), (2, 4), (2, 4))}])
    assert not os.path.exists(out)
    # at the shapes it runs at, the build is TensorRT's
    assert _cli("build", path, "-o", out, "--shapes", "x:1x4").returncode == 0
    with open(os.path.join(out, "manifest.json")) as f:
        assert [s["backend"] for s in json.load(f)["segments"]] == ["tensorrt"]


def positions_past_the_table() -> onnx.ModelProto:
    """GPT-2's embeddings with a cache: token ids into a 50-row table; position ids Range(0, S)
    offset by the cached length P (Shape of past), into an 8-row table: it runs at P + S <= 8."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    consts = [numpy_helper.from_array(rng.standard_normal((rows, 4)).astype(np.float32), name)
              for name, rows in (("wte", 50), ("wpe", 8))]
    consts += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
               (("zero", 0), ("one", 1), ("i1", [1]), ("ax0", [0]), ("ax1", 1))]
    nodes = [h.make_node("Shape", ["ids"], ["ids_shape"]), h.make_node("Gather", ["ids_shape", "one"], ["seq"]),
             h.make_node("Range", ["zero", "seq", "one"], ["steps"]),
             h.make_node("Shape", ["past"], ["past_shape"]), h.make_node("Gather", ["past_shape", "one"], ["cached"]),
             h.make_node("Add", ["steps", "cached"], ["positions"]),
             h.make_node("Unsqueeze", ["positions", "ax0"], ["pos2"]),
             h.make_node("Gather", ["wpe", "pos2"], ["p"], name="position_lookup"),
             h.make_node("Gather", ["wte", "ids"], ["w"], name="token_lookup"), h.make_node("Add", ["w", "p"], ["y"])]
    return model(nodes, [vi("ids", [1, "S"], T.INT64), vi("past", [1, "P", 4])], [vi("y", [1, "S", 4])], consts)


def test_positions_past_the_models_last_are_one_error_at_build(tmp_path) -> None:
    """TensorRT builds such a model at any shapes (an index is data); a folder built for more
    positions than its table has failed at every run. The build runs it once at the max shapes
    where the graph's position ids may pass the table's rows, and says so."""
    path, out, last = _refused_past_its_rows(positions_past_the_table(), tmp_path, "gpt", "ids:1x6,past:1x3x4")
    assert last.startswith(f"trt-backend: error: {path}: the model cannot run at the max shapes of profile 0 "
                           "(ids 1x6, past 1x3x4): Gather 'position_lookup' indexes 8 row(s) up to 8 there, "
                           "and ONNX Runtime fails there: "), last
    import trt_backend
    from trt_backend.errors import ProfileError

    ranges = [{"ids": ((1, 1), (1, 4), (1, 6)), "past": ((1, 0, 4), (1, 2, 4), (1, 3, 4))}]
    with pytest.raises(ProfileError, match=r"max shapes of profile 0 \(ids 1x6, past 1x3x4\)"):
        trt_backend.build(path, out, profiles=ranges)
    assert not os.path.exists(out)
    assert _cli("build", path, "-o", out, "--shapes", "ids:1x5,past:1x3x4").returncode == 0  # 8 positions: its last
    # run at such shapes: ONNX Runtime's error, with the shapes it was read against
    proc = _cli("run", path, "--shapes", "ids:1x6,past:1x3x4", "--emulate")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "failed on inputs ids 1x6, past 1x3x4: " in proc.stderr and "out of data bounds" in proc.stderr


def mask_shorter_than_its_positions() -> onnx.ModelProto:
    """GPT-2's attention mask: the mask [1, T], reshaped to [batch, -1] (a length the graph
    infers), picked at positions Range(0, S + P) counted from the tokens and the cache: it runs
    where T = S + P, which the graph's bounds cannot tell (the -1)."""
    from onnx import numpy_helper

    consts = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("zero", 0), ("one", 1), ("ax0", [0]), ("rest", [-1]))]
    nodes = [h.make_node("Shape", ["ids"], ["ids_shape"]), h.make_node("Gather", ["ids_shape", "one"], ["seq"]),
             h.make_node("Shape", ["past"], ["past_shape"]), h.make_node("Gather", ["past_shape", "one"], ["cached"]),
             h.make_node("Add", ["seq", "cached"], ["total"]), h.make_node("Range", ["zero", "total", "one"], ["at"]),
             h.make_node("Gather", ["ids_shape", "zero"], ["batch"]), h.make_node("Unsqueeze", ["batch", "ax0"], ["b"]),
             h.make_node("Concat", ["b", "rest"], ["target"], axis=0), h.make_node("Cast", ["mask"], ["m"], to=T.FLOAT),
             h.make_node("Reshape", ["m", "target"], ["rows"]),
             h.make_node("Gather", ["rows", "at"], ["y"], axis=1, name="mask_lookup")]
    return model(nodes, [vi("ids", [1, "S"], T.INT64), vi("past", [1, "P", 4]), vi("mask", [1, "T"], T.INT64)],
                 [vi("y", None)], consts)


def test_a_mask_shorter_than_the_positions_it_is_read_at_is_one_error_at_build(tmp_path) -> None:
    """Where indices made from shapes pick from rows the bounds cannot size (a Reshape's -1),
    the build runs the model once at the max shapes: a folder for a mask shorter than the tokens
    and the cache (the all-ones shapes an error suggests for GPT-2) is refused, one that fits is
    built and runs as ONNX Runtime runs the model."""
    path, out, last = _refused_past_its_rows(mask_shorter_than_its_positions(), tmp_path, "mask",
                                             "ids:1x1,past:1x1x4,mask:1x1")
    assert last.startswith(f"trt-backend: error: {path}: the model cannot run at the max shapes of profile 0 "
                           "(ids 1x1, past 1x1x4, mask 1x1), where Gather 'mask_lookup' picks rows by indices made "
                           "from the inputs' shapes: ONNX Runtime fails there"), last
    assert _cli("build", path, "-o", out, "--shapes", "ids:1x1,past:1x1x4,mask:1x2").returncode == 0
    import trt_backend

    feeds = {"ids": np.zeros((1, 1), np.int64), "past": np.zeros((1, 1, 4), np.float32),
             "mask": np.array([[1, 0]], np.int64)}
    with trt_backend.Session.load(out, trt_backend.SessionOptions(emulate=True)) as sess:
        np.testing.assert_array_equal(sess.run(None, feeds)[0], np.array([[1.0, 0.0]], np.float32))

def by_rate(compare: str) -> onnx.ModelProto:
    """silero-vad's form: x [1, N] and a sample rate ``sr``; an If on ``compare``(sr, 16000) runs
    x through a Relu, or (its other rate) reshapes it to [1, 2, 128], which only N = 256 fits (and
    TensorRT's builder refuses at N = 512)."""
    from onnx import numpy_helper

    then = h.make_graph([h.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", [1, "N"])])
    other = h.make_graph([h.make_node("Reshape", ["x", "half"], ["e0"]),
                          h.make_node("ReduceMax", ["e0"], ["e"], axes=[1], keepdims=0)], "other", [],
                         [vi("e", [1, 128])], [numpy_helper.from_array(np.array([1, 2, 128], np.int64), "half")])
    nodes = [h.make_node(compare, ["sr", "rate"], ["is16k"]),
             h.make_node("If", ["is16k"], ["y"], then_branch=then, else_branch=other, name="by_rate")]
    rate = numpy_helper.from_array(np.array(16000 if compare == "Equal" else 12000, np.int64), "rate")
    return model(nodes, [vi("x", [1, "N"]), vi("sr", [], T.INT64)], [vi("y", None)], [rate])


def test_a_sample_rate_and_branches_on_input_values_do_not_fail_a_build(tmp_path) -> None:
    """Random data drew the sample rate 0..2, took the other branch, and the check of shapes the
    model cannot run at failed the build of silero-vad at shapes it runs at. A one-element input
    compared with a constant now takes that constant; where a branch is chosen on input values
    otherwise, a failure on random data is a warning (real inputs may run), and the folder is written."""
    path, out = str(tmp_path / "equal.onnx"), str(tmp_path / "equal")
    onnx.save(by_rate("Equal"), path)
    proc = _cli("build", path, "-o", out, "--shapes", "x:1x512")
    assert proc.returncode == 0 and "demoted 1 node" in proc.stdout and "ONNX Runtime fails" not in proc.stderr
    proc = _cli("run", out, "--emulate")
    assert proc.returncode == 0 and "sr: shape () int64  min 16000 max 16000" in proc.stdout, proc.stderr
    path, out = str(tmp_path / "greater.onnx"), str(tmp_path / "greater")
    onnx.save(by_rate("Greater"), path)
    proc = _cli("build", path, "-o", out, "--shapes", "x:1x512")
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "ONNX Runtime fails at the opt shapes of profile 0" in ln]
    assert len(warned) == 1 and "If 'by_rate' chooses on its inputs' values" in warned[0]
    assert os.path.exists(os.path.join(out, "manifest.json"))
    assert _cli("run", out, "--emulate", "--int-range", "sr:16000,16000").returncode == 0


def test_a_builder_refusal_at_shapes_the_model_runs_at_stays_a_demotion(tmp_path) -> None:
    out = str(tmp_path / "squeeze")
    proc = _cli("build", _light("light_squeezenet"), "-o", out, "--workspace-mb", "0", "--shapes", "data_0:1x3x224x224")
    assert proc.returncode == 0, proc.stderr
    assert "demoted 105 nodes of segment 0" in proc.stdout


def test_inspect_of_the_folder_says_it_once_too_and_verbose_lists_every_node(demoted_build, capsys) -> None:
    out, _ = demoted_build
    assert main(["inspect", out]) == 0
    text = capsys.readouterr().out
    assert text.count("maxScratchSize") == 1 and "demoted 105 nodes of segment 0" in text
    assert main(["inspect", out, "-v"]) == 0
    verbose = capsys.readouterr().out
    assert verbose.count("maxScratchSize") == 1
    assert len(re.findall(r"^    node \d+ '\S+' \(\w+\)$", verbose, re.M)) == 105


def test_build_report_of_a_normal_build(tmp_path) -> None:
    out, report = str(tmp_path / "demo"), str(tmp_path / "report.json")
    assert main(["build", DEMO_PATH, "-o", out, "--shapes", "image:2x3x32x32", "--precision", "fp16",
                 "--report", report]) == 0
    data = json.load(open(report))
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert data["manifest_digest"] == manifest["digest"] and data["demoted"] == []
    engines = [s for s in data["segments"] if s["backend"] == "tensorrt"]
    assert [s["id"] for s in engines] == [0, 2]
    for s in engines:
        assert s["precision"] == "fp16" and s["seconds"] > 0 and s["engine_bytes"] == os.path.getsize(
            os.path.join(out, s["engine"]))
    assert data["segments"][1] == {"id": 1, "backend": "onnxruntime", "nodes": 1, "model": "segment_1.onnx"}


# ------------------------------------------------------------------ census by op, real refusal first

def relu_chain() -> onnx.ModelProto:
    """x -> r0 -> r1 -> r2 -> r3 -> r4 (Relu): r0, r2 and r4 excluded by the user; r1 and r3, each
    a lone TensorRT group, go to ONNX Runtime for the minimum segment size."""
    nodes = [h.make_node("Relu", ["x" if k == 0 else f"t{k - 1}"], [f"t{k}" if k < 4 else "y"], name=f"r{k}")
             for k in range(5)]
    return model(nodes, [vi("x", [2, 4])], [vi("y", [2, 4])])


def test_census_is_one_row_per_op_with_the_real_refusal_first(tmp_path, capsys) -> None:
    path = str(tmp_path / "relus.onnx")
    onnx.save(relu_chain(), path)
    assert main(["inspect", path, "--exclude-nodes", "r0,r2,r4"]) == 0
    text = capsys.readouterr().out
    census = text[text.index("Fallback census"):].strip().splitlines()
    assert census == ["Fallback census (5 nodes on ONNX Runtime)",
                      "  op    count  reason",
                      "  Relu      5  3: excluded by user (by node name)",
                      "               2: demoted: TensorRT group of 1 node(s) is below the minimum segment size 3"]
    assert main(["inspect", path, "--exclude-nodes", "r0,r2,r4", "--min-segment-size", "1"]) == 0
    text = capsys.readouterr().out  # (one cause: as the nodes give it)
    assert text[text.index("Fallback census"):].splitlines()[2] == "  Relu      3  excluded by user (by node name)"


# ------------------------------------------------------------------ boundaries summarized in run

def wide_model(n: int = 30) -> onnx.ModelProto:
    """n Sigmoids of x with long output names, concatenated by an excluded Concat: the TensorRT
    segment hands n tensors to ONNX Runtime."""
    names = [f"a_rather_long_intermediate_tensor_name_{k:02d}" for k in range(n)]
    nodes = [h.make_node("Sigmoid", ["x"], [t], name=f"s{k}") for k, t in enumerate(names)]
    nodes.append(h.make_node("Concat", names, ["y"], name="cat", axis=1))
    return model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3 * n])])


def test_run_summarizes_boundary_tensors(tmp_path, capsys) -> None:
    path = str(tmp_path / "wide.onnx")
    onnx.save(wide_model(), path)
    assert main(["run", path, "--exclude-ops", "Concat", "--no-boundary-cost", "--emulate"]) == 0
    out = capsys.readouterr().out
    seg_lines = [ln for ln in out.splitlines() if ln.startswith("  segment ")]
    assert len(seg_lines) == 2 and all(len(ln) < 200 for ln in seg_lines)
    assert re.search(r"x -> a_rather_long_intermediate_tensor_name_00, … \d+ more \(30 tensors\)$", seg_lines[0])
    assert "(boundary tensors cut short; -v lists them all)" in out
    assert main(["run", path, "--exclude-ops", "Concat", "--no-boundary-cost", "--emulate", "-v"]) == 0
    verbose = capsys.readouterr().out
    assert all(f"a_rather_long_intermediate_tensor_name_{k:02d}" in verbose.splitlines()[1] for k in range(30))


# ------------------------------------------------------------------ every missing profile at once

def three_inputs() -> onnx.ModelProto:
    nodes = [h.make_node("MatMul", ["ids", "w"], ["e"], name="mm"),
             h.make_node("Add", ["e", "mask"], ["s"], name="add"),
             h.make_node("Mul", ["s", "pos"], ["y"], name="mul")]
    w = h.make_tensor("w", T.FLOAT, [8, 8], np.ones(64, np.float32).tolist())
    return model(nodes, [vi("ids", ["batch", "seq", 8]), vi("mask", ["batch", "seq", 8]), vi("pos", ["batch", 1, 8])],
                 [vi("y", ["batch", "seq", 8])], [w])


def test_every_missing_profile_is_named_at_once_with_a_shapes_line_to_paste(tmp_path, capsys) -> None:
    path = str(tmp_path / "three.onnx")
    onnx.save(three_inputs(), path)
    assert main(["run", path, "--emulate"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("trt-backend: error: 3 inputs have dynamic shapes and no profile "
                                              "gives one: 'ids' ['batch', 'seq', 8], 'mask' ['batch', 'seq', 8], "
                                              "'pos' ['batch', 1, 8]")
    shapes = re.search(r"--shapes (\S+)", err).group(1)  # type: ignore[union-attr]
    assert shapes == "ids:1x1x8,mask:1x1x8,pos:1x1x8"
    assert main(["run", path, "--emulate", "--shapes", shapes]) == 0  # (the line as given works)
    capsys.readouterr()
    assert main(["run", path, "--emulate", "--exclude-ops", "MatMul,Add,Mul"]) == 1  # (no TensorRT: random inputs)
    err = capsys.readouterr().err.strip()
    assert "3 inputs have dynamic shapes: 'ids' [batch, seq, 8]" in err
    assert "--shapes ids:1x1x8,mask:1x1x8,pos:1x1x8" in err


# ------------------------------------------------------------------ progress

def test_progress_handler_rewrites_one_line_on_a_terminal_and_prints_lines_elsewhere() -> None:
    import logging

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    logger = logging.getLogger("trt_backend.progress")
    old = (logger.level, logger.propagate)
    for stream, after in ((Terminal(), 5.0), (io.StringIO(), 0.0), (io.StringIO(), 60.0)):
        handler = ProgressHandler(stream, after_s=after)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            progress("planning %s", "m.onnx")
            progress("engine %d/%d built", 1, 2)
            if isinstance(stream, Terminal):
                assert stream.getvalue().count("\r\x1b[K") == 2 and "\n" not in stream.getvalue()
                handler.clear()
                assert stream.getvalue().endswith("\r\x1b[K")
            elif after == 0.0:
                lines = stream.getvalue().splitlines()
                assert len(lines) == 2 and re.match(r"^\[\s*\d+\.\d s\] planning m\.onnx$", lines[0])
            else:
                assert stream.getvalue() == ""  # (a quick command prints none)
        finally:
            logger.removeHandler(handler)
            handler.close()
            logger.setLevel(old[0])
            logger.propagate = old[1]


def test_a_step_still_running_when_progress_lines_begin_is_said_then() -> None:
    """Off a terminal, progress lines begin once a command has run a while: a step that began
    before and ran on (an int8 build's calibration from 1 s to 11 s) printed nothing until it
    ended. At that moment the running step is said, with the second it began; a command that
    ends before says nothing."""
    import logging
    import time

    logger = logging.getLogger("trt_backend.progress")
    old = (logger.level, logger.propagate)
    from trt_backend._progress import settle

    for quick in (False, "closed", "settled"):
        stream = io.StringIO()
        handler = ProgressHandler(stream, after_s=0.3)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            progress("planning %s", "m.onnx")
            progress("calibrating %d segment input(s)", 3)
            if quick:  # (a command that ended, or one that waits now, as serve does once it serves)
                handler.close() if quick == "closed" else settle()
                time.sleep(0.5)
                assert stream.getvalue() == ""
                continue
            time.sleep(0.6)
            lines = stream.getvalue().splitlines()
            assert len(lines) == 1 and re.match(r"^\[\s*0\.\d s\] calibrating 3 segment input\(s\) \(the last step "
                                                r"begun, at 0\.3 s\)$", lines[0]), lines
            progress("engine %d/%d built", 1, 1)
            assert stream.getvalue().splitlines()[1].endswith("engine 1/1 built")
        finally:
            logger.removeHandler(handler)
            handler.close()
            logger.setLevel(old[0])
            logger.propagate = old[1]


def test_progress_of_planning_calibration_and_builds_on_a_terminal(tmp_path) -> None:
    proc = _cli("build", DEMO_PATH, "-o", str(tmp_path / "b"), "--min-shapes", "image:1x3x32x32", "--opt-shapes",
                "image:2x3x32x32", "--max-shapes", "image:4x3x32x32", stderr_tty=True)
    assert proc.returncode == 0, proc.stderr
    updates = [u for u in proc.stderr.split("\r\x1b[K") if u.strip()]
    texts = [re.sub(r"^\[\d+ s\] ", "", u) for u in updates]
    assert any(t.startswith("planning ") for t in texts)
    assert any(t.startswith("calibrating ") for t in texts)
    assert any(t.startswith("building 2 engine(s)") for t in texts)
    assert any(re.match(r"engine 2/2: segment \d built in", t) for t in texts)
    assert "\n" not in proc.stderr  # (nothing else was said: every update rewrote the one line)
    assert proc.stderr.endswith("\r\x1b[K")  # (the progress line is erased at the end)
    assert "wrote " in proc.stdout and "\x1b" not in proc.stdout


def test_precision_search_reports_its_rounds_as_they_come(tmp_path) -> None:
    proc = _cli("build", DEMO_PATH, "-o", str(tmp_path / "auto"), "--shapes", "image:2x3x32x32", "--precision", "auto",
                "--allow", "fp16", "-v")
    assert proc.returncode == 0, proc.stderr
    live = [ln for ln in proc.stderr.splitlines() if ln.startswith("INFO trt_backend.progress: precision search: ")]
    assert live and any(": start: " in ln or "round 1" in ln for ln in live)
    block = proc.stderr.index("precision search (")  # (the summary comes after the live lines)
    assert proc.stderr.index(live[0]) < block


def test_an_engine_taken_from_the_engine_cache_is_not_said_to_be_built(tmp_path, capsys) -> None:
    """A build whose engines come from the engine cache (another folder, the same segments)
    printed "built in 0.01 s" and recorded the load as build seconds; the line and the manifest
    say it came from the cache."""
    shapes = ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:4x3x32x32"]
    cache = str(tmp_path / "cache")
    assert main(["build", DEMO_PATH, "-o", str(tmp_path / "first"), "--cache-dir", cache, *shapes]) == 0
    first = capsys.readouterr().out
    assert "from the engine cache" not in first and len(re.findall(r"engine segment_\d\.engine \d+ bytes, built in",
                                                                    first)) == 2
    # (another planning setting that plans the same segments: a miss of the build cache, hits of the engine cache)
    assert main(["build", DEMO_PATH, "-o", str(tmp_path / "second"), "--cache-dir", cache, "--min-segment-size", "2",
                 *shapes]) == 0
    second = capsys.readouterr().out
    assert "(a copy of an earlier build" not in second  # (not the build cache: the engines, one by one)
    assert len(re.findall(r"engine segment_\d\.engine \d+ bytes, from the engine cache in", second)) == 2, second
    manifest = json.load(open(tmp_path / "second" / "manifest.json"))
    assert [s.get("engine_cache_hit") for s in manifest["segments"] if s["engine"]] == [True, True]
