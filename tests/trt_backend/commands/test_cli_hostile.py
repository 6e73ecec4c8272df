"""Every command against a hostile environment, on real runs: output paths that cannot be written
(refused in one line before any work, nothing left behind), a closed stdout (quiet, exit 141 as a
tool killed by SIGPIPE), a busy port and a model without profiles for ``serve`` (one line each,
before Ray starts), two builds into one ``-o`` (the second refused, never a lost success), and
file modes that follow the user's umask."""
from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.helpers import const, model, vi
from trt_backend._files import output_lock
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH

pytestmark = pytest.mark.usefixtures("flavor")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SHAPES = ["--shapes", "image:2x3x32x32"]
FAST_BENCH = ["--warmup-ms", "10", "--duration-s", "0.05", "--iterations", "2", "--rounds", "1", "--no-progress"]
UNWRITABLE = "/sys"  # (root may write almost anywhere; sysfs takes no new files, even from root)


def _cli(*args: str, cwd: str = ROOT, stdout: int | None = subprocess.PIPE, umask: int | None = None,
         timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "trt_backend", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, env=env, cwd=cwd, timeout=timeout,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def _one_error_line(err: str, starts: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trt-backend: error: " + starts), err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("hostile") / "demo_build")
    assert main(["build", DEMO_PATH, "-o", out, "--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32",
                 "--max-shapes", "image:4x3x32x32"]) == 0
    return out


# ------------------------------------------------------------------ outputs that cannot be written

# (command line, the flag, what it writes: file | folder | tree), PATH replaced by the path tried
OUTPUTS = [
    (["inspect", DEMO_PATH, "--json", "PATH"], "--json", "file"),
    (["inspect", DEMO_PATH, "--picture", "PATH"], "--picture", "file"),
    (["inspect", DEMO_PATH, "--annotated", "PATH"], "--annotated", "file"),
    (["inspect", DEMO_PATH, "--export-segments", "PATH"], "--export-segments", "folder"),
    (["run", DEMO_PATH, *SHAPES, "--emulate", "--outputs", "PATH"], "--outputs", "file"),
    (["run", DEMO_PATH, *SHAPES, "--emulate", "--plan-json", "PATH"], "--plan-json", "file"),
    (["build", DEMO_PATH, *SHAPES, "-o", "PATH"], "-o", "folder"),
    (["build", DEMO_PATH, *SHAPES, "-o", "OK", "--report", "PATH"], "--report", "file"),
    (["build", DEMO_PATH, *SHAPES, "-o", "OK", "--timing-cache", "PATH"], "--timing-cache", "file"),
    (["bench", DEMO_PATH, *SHAPES, "--emulate", *FAST_BENCH, "--json", "PATH"], "--json", "file"),
    (["bench", DEMO_PATH, *SHAPES, "--emulate", *FAST_BENCH, "--plot", "PATH"], "--plot", "file"),
    (["compare", DEMO_PATH, *SHAPES, "--emulate", "--json", "PATH"], "--json", "file"),
    (["export-triton", DEMO_PATH, *SHAPES, "-o", "PATH"], "-o", "folder"),
    (["demo", "--out", "PATH"], "--out", "tree"),
    (["build", DEMO_PATH, *SHAPES, "-o", "OK", "--cache-dir", "PATH"], "--cache-dir", "tree"),
    (["inspect", DEMO_PATH, "--cache-dir", "PATH"], "--cache-dir", "tree"),
]


def _paths(tmp_path, kind: str) -> list[tuple[str, str]]:
    """(path, what the error says) that cannot be written as ``kind``."""
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_folder").mkdir()
    wrong = (str(tmp_path / "a_folder"), "is a folder") if kind == "file" else \
        (str(tmp_path / "a_file"), "exists and is not a folder")
    bad = [(f"{UNWRITABLE}/out.x", f"cannot create files in folder {UNWRITABLE}"), wrong,
           (str(tmp_path / "a_file" / "under"), f"{tmp_path / 'a_file'} is not a folder")]
    if kind != "tree":
        bad.append((str(tmp_path / "missing" / "out.x"), f"folder {tmp_path / 'missing'} does not exist"))
    return bad


@pytest.mark.parametrize("argv, flag, kind", OUTPUTS, ids=[f"{a[0]} {f}" for a, f, _ in OUTPUTS])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(argv, flag, kind, tmp_path, capsys,
                                                                    monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    for path, why in _paths(tmp_path, kind):
        before = sorted(os.listdir(tmp_path))
        args = [path if a == "PATH" else str(tmp_path / "ok_out") if a == "OK" else a for a in argv]
        start = time.perf_counter()
        rc = main(args)
        out, err = capsys.readouterr()
        assert rc == (2 if argv[0] == "compare" else 1), (args, err)
        _one_error_line(err, f"cannot write {flag} {path}: {why}")
        assert out == "", "nothing ran"
        assert sorted(os.listdir(tmp_path)) == before, "nothing written, no temporary file left"
        assert time.perf_counter() - start < 30


# ------------------------------------------------------------------ a closed stdout

CLOSED_PIPE = [
    ["inspect", DEMO_PATH],
    ["inspect", "FOLDER"],
    ["run", "FOLDER"],
    ["run", DEMO_PATH, *SHAPES, "--emulate"],
    ["compare", DEMO_PATH, *SHAPES, "--emulate"],
    ["bench", "FOLDER", *FAST_BENCH],
    ["build", DEMO_PATH, *SHAPES, "-o", "TMP/b"],
    ["export-triton", "FOLDER", "-o", "TMP/repo", "--dry-run"],
    ["demo", "--out", "TMP/demo"],
    ["--help"],
    ["inspect", "--help"],
]


@pytest.mark.parametrize("argv", CLOSED_PIPE, ids=[" ".join(a[:1] + ["help" if "--help" in a else "DIR" if "FOLDER" in a
                                                                     else "MODEL"]) for a in CLOSED_PIPE])
def test_a_closed_stdout_ends_quietly_like_a_tool_killed_by_sigpipe(argv, demo_folder, tmp_path) -> None:
    args = [demo_folder if a == "FOLDER" else a.replace("TMP", str(tmp_path)) for a in argv]
    reader, writer = os.pipe()
    os.close(reader)  # (``trt-backend ... | head -0``: nobody reads)
    try:
        proc = _cli(*args, stdout=writer, cwd=str(tmp_path))
    finally:
        os.close(writer)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert "Broken pipe" not in proc.stderr and "error" not in proc.stderr.lower(), proc.stderr


def test_head_1_of_inspect_gets_the_first_line_and_no_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run(f"{sys.executable} -m trt_backend inspect {DEMO_PATH} --exclude-ops Relu | head -1",
                          shell=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.stdout.startswith("model ") and proc.stdout.count("\n") == 1
    assert proc.stderr == ""


# ------------------------------------------------------------------ serve: one line, before Ray

def dynamic_model() -> onnx.ModelProto:
    w = h.make_tensor("w", T.FLOAT, [4, 4], np.eye(4, dtype=np.float32).ravel().tolist())
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"], name="mm"), h.make_node("Relu", ["m"], ["r"], name="relu"),
             h.make_node("Add", ["r", "y"], ["z"], name="add")]
    return model(nodes, [vi("x", ["n", 4]), vi("y", ["n", 4])], [vi("z", ["n", 4])], [w])


def test_serve_on_a_busy_port_is_one_line_before_ray_starts(demo_folder, capsys) -> None:
    pytest.importorskip("ray")
    import ray

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        assert main(["serve", demo_folder, "--port", str(port)]) == 1
    _one_error_line(capsys.readouterr().err, f"port {port} on 127.0.0.1 is already in use by another program")
    assert not ray.is_initialized()


def test_serve_at_an_address_no_ray_cluster_answers_is_one_line_before_ray_starts(demo_folder, capsys) -> None:
    """Ray's client retried a cluster address nothing answered at for minutes, printing native
    warnings, and trt-backend said nothing; a port nothing listens on is one line now."""
    pytest.importorskip("ray")
    import ray

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert main(["serve", demo_folder, "--address", f"127.0.0.1:{port}"]) == 1
    _one_error_line(capsys.readouterr().err, f"no Ray cluster answers at 127.0.0.1:{port}")
    assert not ray.is_initialized()


def test_serve_of_a_model_without_profiles_is_one_line_before_ray_starts(tmp_path, capsys) -> None:
    pytest.importorskip("ray")
    import ray

    path = str(tmp_path / "dyn.onnx")
    onnx.save(dynamic_model(), path)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert main(["serve", path, "--port", str(port)]) == 1
    _one_error_line(capsys.readouterr().err, "2 inputs have dynamic shapes and no profile gives one: 'x' ['n', 4], "
                                             "'y' ['n', 4]; CLI: --shapes x:1x4,y:1x4")
    assert not ray.is_initialized()


# ------------------------------------------------------------------ one writer per -o

def test_a_build_into_a_folder_another_build_is_writing_is_refused(tmp_path, capsys) -> None:
    out = str(tmp_path / "shared")
    with output_lock(out):  # (what a running build holds)
        assert main(["build", DEMO_PATH, *SHAPES, "-o", out]) == 1
        _one_error_line(capsys.readouterr().err, f"{out}: another trt-backend process (process {os.getpid()}) is "
                                                 "writing this folder")
        assert main(["export-triton", DEMO_PATH, *SHAPES, "-o", out]) == 1
        _one_error_line(capsys.readouterr().err, f"{out}: another trt-backend process")
        assert not os.path.exists(out)
    assert main(["build", DEMO_PATH, *SHAPES, "-o", out]) == 0  # (the lock went with its holder)
    assert sorted(os.listdir(tmp_path)) == ["shared"]  # (no lock file left)


def test_two_builds_at_once_into_one_folder_never_lose_a_reported_success(tmp_path) -> None:
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_inception_v1.onnx")
    out = str(tmp_path / "same")
    env = {**os.environ, "PYTHONPATH": ROOT}
    procs = [subprocess.Popen([sys.executable, "-m", "trt_backend", "build", light, "-o", out], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT) for _ in range(2)]
    results = [(p.wait(600), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    digests = [re.search(r"\(digest (sha256:[0-9a-f]+)\.\.\.", o).group(1)  # type: ignore[union-attr]
               for rc, o, _ in results if rc == 0]
    refused = [e for rc, _, e in results if rc != 0]
    assert digests, results
    for err in refused:
        _one_error_line(err.splitlines()[-1] + "\n", f"{out}: another trt-backend process")
    final = json.load(open(os.path.join(out, "manifest.json")))["digest"]
    if refused:  # (the usual case: they overlapped)
        assert [final.startswith(d) for d in digests] == [True]
    else:  # (the machine ran them one after the other: the later one's folder is there)
        assert any(final.startswith(d) for d in digests)


# ------------------------------------------------------------------ file modes follow the umask

def _modes(folder: str) -> set[str]:
    found = {oct(stat.S_IMODE(os.stat(folder).st_mode))}
    for base, dirs, files in os.walk(folder):
        found |= {oct(stat.S_IMODE(os.stat(os.path.join(base, n)).st_mode)) for n in dirs + files}
    return found


@pytest.mark.parametrize("umask, folder_mode, file_mode", [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_written_files_follow_the_umask(tmp_path, umask, folder_mode, file_mode) -> None:
    src = str(tmp_path / "ext.onnx")
    big = const("w", np.ones((256, 256), np.float32))
    m = model([h.make_node("MatMul", ["x", "w"], ["m"], name="mm"), h.make_node("Relu", ["m"], ["r"], name="relu"),
               h.make_node("Sin", ["r"], ["y"], name="sin")], [vi("x", [2, 256])], [vi("y", [2, 256])], [big])
    onnx.save_model(m, src, save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    build = _cli("build", DEMO_PATH, *SHAPES, "-o", str(tmp_path / "b"), "--report", str(tmp_path / "r.json"),
                 umask=umask)
    assert build.returncode == 0, build.stderr
    repo = _cli("export-triton", src, "-o", str(tmp_path / "repo"), "--exclude-ops", "Sin", umask=umask)
    assert repo.returncode == 0, repo.stderr
    segs = _cli("inspect", src, "--export-segments", str(tmp_path / "segs"), umask=umask)
    assert segs.returncode == 0, segs.stderr
    assert any(n.endswith(".data") for _, _, files in os.walk(tmp_path / "repo") for n in files)
    for folder in ("b", "repo", "segs"):
        modes = _modes(str(tmp_path / folder))
        assert modes <= {oct(folder_mode), oct(file_mode)} and oct(folder_mode) in modes, (folder, modes)
    assert _modes(str(tmp_path / "r.json")) == {oct(file_mode)}


@pytest.mark.parametrize("argv", [["build", "--bogus"], ["inspect"], ["nosuch"], ["compare", "m.onnx", "--atol"],
                                  ["run", "m.onnx", "--shapes"], ["export-triton"]])
def test_a_command_line_the_parser_refuses_is_one_line_and_exit_2(argv, capsys) -> None:
    """An unknown option, a missing argument or value: one line naming it and where the usage is
    (not argparse's whole usage block), exit 2 (for compare, 1 would read as "outputs differ")."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == ""
    (line,) = err.splitlines()
    assert re.fullmatch(r"trt-backend( [a-z-]+)?: error: .+ \(usage: trt-backend( [a-z-]+)? -h\)", line), line


def test_ctrl_c_after_the_folder_was_written_says_it_is_whole(tmp_path, capsys, monkeypatch) -> None:
    """Ctrl-C while build prints its summary: the folder was committed whole by then, and the
    error line says so (it said "interrupted" over a complete folder); before the commit, nothing
    is left and the line is the plain one."""
    import trt_backend.commands.build as build_command

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    out = str(tmp_path / "b")
    monkeypatch.setattr(build_command, "print_build", interrupt)
    assert main(["build", DEMO_PATH, "-o", out, "--shapes", "image:2x3x32x32"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"trt-backend: interrupted after {out} was written whole (its manifest is sealed; "
                       f"trt-backend inspect {out} shows it)")
    assert main(["inspect", out]) == 0
    monkeypatch.setattr(build_command, "build", interrupt)
    other = str(tmp_path / "c")
    assert main(["build", DEMO_PATH, "-o", other, "--shapes", "image:2x3x32x32"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "trt-backend: interrupted"
    assert not os.path.exists(other)


@pytest.mark.parametrize("argv, command", [(["run", "m.onnx", "--bogus"], "run"),
                                           (["inspect", "--bogus", "m.onnx"], "inspect"),
                                           (["export-triton", "DIR", "-o", "R", "--nope", "1"], "export-triton")])
def test_an_unknown_option_names_its_commands_usage(argv, command, capsys) -> None:
    """argparse's top-level parser refused options no parser knew, naming its own usage
    ("trt-backend -h"), where the command's is the one that lists them."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    (line,) = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and line.startswith(f"trt-backend {command}: error: unrecognized arguments: ")
    assert line.endswith(f"(usage: trt-backend {command} -h)")


@pytest.mark.usefixtures("flavor")
def test_sigterm_during_a_build_leaves_nothing_behind(tmp_path) -> None:
    """``timeout``, ``kill`` or a cancelled CI job end a build with SIGTERM, whose default action
    ended the process where it was: the staging folder beside -o (weights and engines, 93 MB on a
    ViT) and its lock stayed. It is raised where the command is, as Ctrl-C is: exit 143, one line,
    nothing left; the signal is sent the moment the staging folder appears (while it is set up)."""
    import glob
    import signal

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(8):
        inits.append(const(f"w{k}", (rng.standard_normal((512, 512)) * 0.04).astype(np.float32)))
        nodes += [h.make_node("MatMul", [x, f"w{k}"], [f"m{k}"], name=f"mm{k}"),
                  h.make_node("Relu", [f"m{k}"], [f"r{k}"], name=f"relu{k}")]
        x = f"r{k}"
    path = str(tmp_path / "chain.onnx")
    onnx.save(model(nodes, [vi("x", ["N", 512])], [vi(x, ["N", 512])], inits), path)
    proc = subprocess.Popen([sys.executable, "-m", "trt_backend", "build", path, "-o", str(tmp_path / "out"),
                             "--shapes", "x:4x512", "--precision", "fp16"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not glob.glob(str(tmp_path / ".build-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "trt-backend: terminated", err
    assert sorted(os.listdir(tmp_path)) == ["chain.onnx"]


def test_stdout_on_a_full_device_or_closed_is_one_line_or_nothing(tmp_path) -> None:
    """stdout on /dev/full ended in OSError's traceback and Python's "Exception ignored" lines;
    a stdout the shell closed (`>&-`) in an AttributeError traceback."""
    for argv in (["inspect", DEMO_PATH], ["--help"], ["build", "--help"]):
        with open("/dev/full", "w") as full:
            proc = _cli(*argv, stdout=full.fileno(), cwd=str(tmp_path))
        assert proc.returncode == 1 and proc.stderr.strip() == \
            "trt-backend: error: cannot write its output: No space left on device", (argv, proc.stderr)
    env = {**os.environ, "PYTHONPATH": ROOT}
    closed = subprocess.run(f"{sys.executable} -m trt_backend inspect {DEMO_PATH} >&-", shell=True,
                            capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert "Traceback" not in closed.stderr and closed.returncode == 0, closed.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_an_output_path_that_is_a_device_or_a_link_is_written_through_never_replaced(tmp_path, capsys) -> None:
    """Outputs are written to a temporary file renamed over the target: a device or a symlink
    given as the target was replaced by a regular file (`--json /dev/stdout` as root replaced the
    system's /dev/stdout link, `--json /dev/full` its device). A device or pipe is written
    through (a full one is one error), a link is followed to the file it names."""
    null, full = tmp_path / "null", tmp_path / "full"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    (tmp_path / "real.json").write_text("keep")
    os.symlink("real.json", tmp_path / "link.json")
    assert main(["inspect", DEMO_PATH, "--json", str(null)]) == 0
    assert main(["inspect", DEMO_PATH, "--json", str(tmp_path / "link.json")]) == 0
    assert main(["inspect", DEMO_PATH, "--json", str(full)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"trt-backend: error: {full}: cannot write to it (No space left on device)", err
    assert stat.S_ISCHR(os.stat(null).st_mode) and stat.S_ISCHR(os.stat(full).st_mode)
    assert os.path.islink(tmp_path / "link.json") and json.loads((tmp_path / "real.json").read_text())["model"]


TAMPERED: list[tuple[tuple[Any, ...], Any, str]] = [  # (field path, value, what the error says)
    (("build",), None, "build must be an object, got null"),
    (("build_options",), None, "build_options must be an object, got null"),
    (("demoted",), "x", "demoted must be a list"),
    (("model_file",), 5, "model_file must be a string, got 5"),
    (("segments", 0, "engine"), 12, "segments[0].engine must be a string or null, got 12"),
    (("segments", 0, "id"), "zero", "segments[0].id must be a whole number"),
    (("segments",), [], "segments [] are not the plan's 3 segment(s)"),
    (("plan",), {}, "plan.segments and plan.nodes must be a list"),
    (("plan", "segments", 0, "nodes"), [0, 1, 2, 999], "plan segment 0 lists node(s) [999] the model does not have"),
    (("plan", "segments", 0, "inputs"), ["nope"], "plan segment 0 does not read and write what its nodes do"),
    (("plan", "segments", 0, "profiles"), [{"image": {"min": [2], "opt": "x", "max": [2]}}],
     "the profile of 'image' must give min, opt and max as lists"),
]


@pytest.mark.parametrize("path, value, says", TAMPERED, ids=[".".join(map(str, t[0])) for t in TAMPERED])
def test_a_manifest_edited_and_sealed_again_is_one_error_at_every_door(demo_folder, tmp_path, capsys, path, value,
                                                                       says) -> None:
    """A manifest's digest says it is as its writer sealed it, and anyone can seal an edited one
    again: a field of the wrong type, or a plan that does not describe the model, ended in a
    traceback (KeyError, TypeError, AttributeError) in inspect, run, compare and export-triton."""
    import shutil

    from trt_backend.artifacts.seal import seal

    folder = str(tmp_path / "edited")
    shutil.copytree(demo_folder, folder)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    manifest.pop("digest", None)
    target = manifest
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(seal(manifest), f)
    for argv in (["inspect", folder], ["run", folder], ["compare", folder],
                 ["export-triton", folder, "-o", str(tmp_path / "repo"), "--dry-run"]):
        assert main(argv) in (1, 2), argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err and err[-1].startswith("trt-backend: error: ") and says in err[-1], (argv, err)
        assert not any("Traceback" in line for line in err)


def test_a_name_with_a_newline_or_a_terminal_escape_keeps_the_error_one_line(tmp_path, capsys) -> None:
    """An input named with a newline and an ANSI colour split the error over three lines and
    turned the terminal red; errors and warnings write control characters escaped."""
    name = "bad\nname\x1b[31mRED\x1b[0m"
    path = str(tmp_path / "named.onnx")
    onnx.save(model([h.make_node("Relu", [name], ["y"])], [vi(name, ["n", 4])], [vi("y", ["n", 4])]), path)
    assert main(["run", path]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "\x1b" not in err, err
    assert err.startswith("trt-backend: error: input 'bad\\nname\\x1b[31mRED\\x1b[0m' has dynamic shape"), err


def test_random_inputs_past_an_address_space_limit_are_one_line(tmp_path) -> None:
    """Under `ulimit -v` (or a container's memory limit) the memory check read the machine's free
    memory alone: numpy's allocation failed in a traceback (in a container, the kernel killed the
    process). What the limit leaves is what is available, and a draw's temporaries count."""
    import resource

    path = str(tmp_path / "relu.onnx")
    onnx.save(model([h.make_node("Relu", ["x"], ["y"])], [vi("x", ["n", 4])], [vi("y", ["n", 4])]), path)
    limit = 4 << 30
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "run", path, "--shapes", "x:200000000x4",
                           "--emulate"], capture_output=True, text=True, env=env, cwd=str(tmp_path),
                          timeout=300, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert err[-1].startswith("trt-backend: error: input 'x': shape (200000000, 4) of float32 needs 3.0 GiB (11.9 "
                              "GiB while it is made), and ") and err[-1].endswith("is available to this process"), err


def test_an_import_a_ctrl_c_cut_short_is_an_interrupt_not_a_traceback(monkeypatch, capsys) -> None:
    """A Ctrl-C while a native extension initializes ends its import in ImportError
    ("initialization failed", raised from the KeyboardInterrupt): said as the interrupt it is."""
    import importlib

    real = importlib.import_module

    def cut_short(name: str, package: str | None = None) -> Any:
        if name == "trt_backend.commands.inspect":
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as e:
                raise ImportError("initialization failed") from e
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", cut_short)
    assert main(["inspect", DEMO_PATH]) == 130
    assert capsys.readouterr().err.strip() == "trt-backend: interrupted"
    monkeypatch.setattr(importlib, "import_module", lambda name, package=None: (_ for _ in ()).throw(
        ImportError("no module named it")) if name == "trt_backend.commands.inspect" else real(name, package))
    with pytest.raises(ImportError, match="no module named it"):  # (any other import error is not an interrupt)
        main(["inspect", DEMO_PATH])
