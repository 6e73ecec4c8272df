"""The CLI's dispatch: every subcommand is listed, only the one being run is imported, and a
command module that fails to import fails loudly instead of vanishing from the CLI."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import helper

import trt_backend.cli as cli
from tests.helpers import const, model, vi
from trt_backend.data.demo import DEMO_PATH


def test_every_command_registers_arguments_and_a_handler() -> None:
    parser = cli.build_parser()
    argv = {"demo": ["demo"], "build": ["build", DEMO_PATH, "-o", "out"],
            "export-triton": ["export-triton", DEMO_PATH, "-o", "out"]}
    for name in cli.COMMANDS:
        args = parser.parse_args(argv.get(name, [name, DEMO_PATH]))
        assert args.func.__name__ == "handle"
        assert args.func.__module__ == f"trt_backend.commands.{name.replace('-', '_')}"


CHILD = textwrap.dedent("""
    import sys
    from trt_backend.cli import main
    rc = main(["inspect", sys.argv[1]])
    loaded = sorted(m for m in sys.modules if m.startswith(("trt_backend.commands.", "trt_backend.bench",
                                                            "trt_backend.accuracy")))
    print("LOADED", rc, ",".join(loaded))
""")


def test_a_command_loads_only_its_own_module(flavor) -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD, DEMO_PATH], capture_output=True, text=True, timeout=300)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOADED"))
    _, rc, loaded = line.split(" ", 2)
    assert rc == "0"
    assert loaded.split(",") == ["trt_backend.commands._args", "trt_backend.commands._argv",
                                 "trt_backend.commands._class_code", "trt_backend.commands._shapes",
                                 "trt_backend.commands.inspect"]


def test_a_command_module_that_fails_to_import_fails_loudly(monkeypatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "broken", "a command whose module is missing")
    with pytest.raises(ModuleNotFoundError, match="trt_backend.commands.broken"):
        cli.main(["broken"])
    with pytest.raises(ModuleNotFoundError, match="trt_backend.commands.broken"):
        cli.build_parser()


def test_the_script_ends_after_the_exit_work_is_done(tmp_path) -> None:
    """``python -m trt_backend`` (and the trt-backend script) end the process without tearing the
    interpreter down, after what Python's exit would do for the program: every output complete,
    the planner's temporary folder (weights stand-ins for the parser) removed, the exit code kept."""
    weights = const("w", np.ones((256, 256), np.float32))  # large enough to be handed to the parser as zeros
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", ["N", 256])],
              [vi("y", ["N", 256])], [weights])
    path = tmp_path / "mm.onnx"
    onnx.save(m, str(path))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    plan = tmp_path / "p.json"
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "inspect", str(path), "--json", str(plan)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"model {path} | ") and proc.stdout.endswith(f"plan written to {plan}\n")
    assert json.loads(plan.read_text())["segments"][0]["backend"] == "tensorrt"
    assert os.listdir(scratch) == []
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "inspect", str(tmp_path / "none.onnx")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"trt-backend: error: {tmp_path / 'none.onnx'}: "
                                                                  "no such file\n")


WAITS = textwrap.dedent("""
    import sys, threading, time
    from trt_backend import cli

    finished = threading.Event()  # (the command's work done: the thread's line comes after it, however slow)
    command = cli.main

    def main(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        finally:
            finished.set()

    cli.main = main

    def late():
        finished.wait()
        time.sleep(0.2)
        print("THREAD DONE", flush=True)

    threading.Thread(target=late).start()
    sys.argv = ["trt-backend", "inspect", sys.argv[1]]
    cli.script_main()
""")


def test_the_script_waits_for_a_thread_that_is_not_a_daemon() -> None:
    proc = subprocess.run([sys.executable, "-c", WAITS, DEMO_PATH], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("THREAD DONE")


LOADS = textwrap.dedent("""
    import sys
    from trt_backend.cli import main
    rc = main(["inspect", sys.argv[1]])
    print("LOADED", rc, ",".join(sorted(sys.modules)))
""")


def test_inspect_of_a_model_loads_only_what_it_uses(flavor) -> None:
    """No ONNX Runtime where the model's types are all known (its version is read without importing
    it), and none of what only other paths use: the spawn context of isolated planning, hashing,
    precision plans, HTML, the type probe's options and random inputs."""
    proc = subprocess.run([sys.executable, "-c", LOADS, DEMO_PATH], capture_output=True, text=True, timeout=300)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("LOADED"))
    _, rc, loaded = line.split(" ", 2)
    assert rc == "0"
    unwanted = {"onnxruntime", "multiprocessing", "hashlib", "html", "trt_backend.engines.precision_plan",
                "trt_backend.ort.options", "trt_backend.ort.random_data"}
    assert unwanted & set(loaded.split(",")) == set()


COLLECTOR = textwrap.dedent("""
    import atexit, gc, sys
    from trt_backend.cli import script_main

    atexit.register(lambda: print("COLLECTOR", gc.isenabled(), gc.get_freeze_count() > 10000, flush=True))
    sys.argv = ["trt-backend", "inspect", sys.argv[1]]
    script_main()
""")


def test_the_script_freezes_what_loading_made_and_collects_as_usual_after() -> None:
    proc = subprocess.run([sys.executable, "-c", COLLECTOR, DEMO_PATH], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "COLLECTOR True True"


BLAS_THREADS = textwrap.dedent("""
    import atexit, os, sys
    from trt_backend.cli import script_main

    atexit.register(lambda: print("BLAS", os.environ.get("OPENBLAS_NUM_THREADS"), flush=True))
    sys.argv = ["trt-backend", "inspect", sys.argv[1]]
    script_main()
""")


@pytest.mark.parametrize("env, expected", [
    ({}, "BLAS 1"),  # numpy's BLAS loads with one thread: it does no work in the command line
    ({"OPENBLAS_NUM_THREADS": "3"}, "BLAS 3"),  # what the user said is kept
    ({"OMP_NUM_THREADS": "2"}, "BLAS None"),  # (OpenBLAS reads this one too)
])
def test_the_script_loads_numpy_with_one_blas_thread_unless_told(env, expected) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                               "OMP_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-c", BLAS_THREADS, DEMO_PATH], capture_output=True, text=True,
                          timeout=300, env={**base, **env})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == expected


def test_main_leaves_its_callers_collector_as_it_is() -> None:
    frozen = gc.get_freeze_count()
    assert cli.main(["inspect", DEMO_PATH]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_an_interrupt_while_the_command_loads_is_one_line(monkeypatch, capsys) -> None:
    """Ctrl-C while a command's modules load or its arguments are read (before the command's own
    handling) ends as later ones do: one line, exit 130, no traceback."""
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["compare", DEMO_PATH]) == 130
    assert capsys.readouterr().err == "trt-backend: interrupted\n"


@pytest.mark.parametrize("line, unknown", [
    (["inspect", "MODEL", "--precision", "fp16"], "--precision fp16"),  # (read as --precision-plan fp16)
    (["build", "MODEL", "-o", "OUT", "--shape", "x:1x8"], "--shape x:1x8"),
])
def test_an_option_is_taken_by_its_full_name_only(line, unknown, tmp_path, capsys) -> None:
    """argparse took a prefix of an option for the option: ``inspect MODEL --precision fp16`` was
    read as ``--precision-plan fp16`` and said it could not read the precision plan "fp16". An
    option is known by its full name now; anything else is the one line naming it."""
    args = [DEMO_PATH if a == "MODEL" else str(tmp_path / "out") if a == "OUT" else a for a in line]
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"unrecognized arguments: {unknown}" in err[0]
