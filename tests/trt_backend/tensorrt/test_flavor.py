"""Builders made from several threads at once. Making a builder takes a lock inside TensorRT and
logs through the Python logger it is given while holding it (a logger other than the first one
registered is announced), and the binding keeps the GIL while it waits for that lock: eight
threads making builders with Python loggers deadlocked here every time (the whole process, so
the check runs in a child process with a timeout). create_builder makes them one at a time.

The same lock-and-GIL inversion hung whole builds: a segment build logging through the Python
logger while another thread's GIL-holding TensorRT call (a parser, a network, an object's release)
waited for TensorRT's lock. Every parse, build and question of trt-backend's holds
``tensorrt_lock``, so that only one thread is in TensorRT at a time."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import threading
    from trt_backend.tensorrt.flavor import create_builder, load_flavor
    flavor = load_flavor("auto")
    trt = flavor.module

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
        def log(self, severity, msg):
            sum(range(10000))  # Python work while TensorRT holds its lock

    loggers = [Logger() for _ in range(8)]
    made, start = [], threading.Barrier(8)

    def make(k):
        start.wait()
        for _ in range(20):
            made.append(create_builder(flavor, loggers[k]))

    threads = [threading.Thread(target=make, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("MADE", len(made))
""")


def test_builders_made_from_many_threads_at_once(flavor) -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "MADE 160" in proc.stdout


WORKERS = textwrap.dedent("""
    import logging, os, sys, tempfile, threading, time
    logging.basicConfig(level=logging.DEBUG, stream=open(os.devnull, "w"))  # every message through Python
    import onnx
    from tests.support.graphs import cnn
    from trt_backend.engines.builder import BuildOptions, compile_segment
    from trt_backend.engines.head_start import HeadStart
    from trt_backend.planning import make_plan
    from trt_backend.tensorrt.flavor import load_flavor
    from trt_backend.tensorrt.oracle import ParserOracle

    flavor = load_flavor("auto")
    model = cnn()
    plan = make_plan(model)
    segment = plan.extract(plan.tensorrt_segments()[0].id)
    ranges = [{"x": ((1, 3, 16, 16), (2, 3, 16, 16), (4, 3, 16, 16))}]
    tmp = tempfile.mkdtemp()
    whole, part = os.path.join(tmp, "cnn.onnx"), os.path.join(tmp, "segment.onnx")
    onnx.save(model, whole)  # (its Resize is refused: a head start of it ends at the parse)
    onnx.save(segment, part)  # a model TensorRT takes whole: a head start builds its engine
    done = {"builds": 0, "questions": 0, "head_starts": 0}
    until = time.monotonic() + 10  # each thread goes on this long

    def builds(precision):
        while time.monotonic() < until:
            compile_segment(segment, ranges, BuildOptions(precision=precision), flavor)
            done["builds"] += 1

    def questions():
        oracle = ParserOracle(flavor)
        while time.monotonic() < until:
            oracle.query(model)
            done["questions"] += 1

    def head_starts():
        k = 0
        while time.monotonic() < until:
            path = part if k % 10 == 0 else whole
            head = HeadStart(path, "auto", ranges, None, tempfile.mkdtemp(dir=tmp))
            head.begin()
            head.wait()
            assert (head.engine is not None) == (path == part), head.problem
            head.remove()
            done["head_starts"] += 1
            k += 1

    threads = [threading.Thread(target=builds, args=("fp32",)), threading.Thread(target=builds, args=("fp16",)),
               threading.Thread(target=questions), threading.Thread(target=head_starts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("DONE", *(f"{k}={v}" for k, v in sorted(done.items())))
""")


def test_builds_questions_and_head_starts_from_many_threads_at_once(flavor) -> None:
    """Two segment builds (fp32 and fp16), the planner's parser questions and head starts, each in
    its own thread for 10 s, every TensorRT message forwarded to Python logging: all go on and
    finish. Without the one lock the same threads hung here within those seconds."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        proc = subprocess.run([sys.executable, "-c", WORKERS], capture_output=True, text=True, timeout=300, cwd=root)
    except subprocess.TimeoutExpired:
        raise AssertionError("threads using TensorRT at once did not finish in 300 s (deadlocked)") from None
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("DONE")]
    done = dict(item.split("=") for item in line.split()[1:])
    assert sorted(done) == ["builds", "head_starts", "questions"] and all(int(v) >= 5 for v in done.values()), line


def test_native_writes_to_stdout_go_to_the_debug_log_where_python_writes_elsewhere() -> None:
    """TensorRT-RTX prints some parser warnings to descriptor 1 ("WARNING: in op ... requires
    precision-lose casting"): on stdout they broke -q and the results there. Where Python's stdout
    writes to its own copy (the CLI's), descriptor 1 is captured with descriptor 2 while TensorRT
    parses or builds; a program whose stdout is descriptor 1 keeps every print."""
    child = (
        "import os, sys, logging\n"
        "from trt_backend.tensorrt.flavor import native_stderr\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format='%(message)s')\n"
        "if sys.argv[1] == 'cli':\n"
        "    sys.stdout = open(os.dup(1), 'w', buffering=1)\n"
        "with native_stderr():\n"
        "    os.write(1, b'native to 1\\n'); os.write(2, b'native to 2\\n')\n"
        "print('ours')\n")
    for mode, native_on_stdout in (("cli", False), ("library", True)):
        proc = subprocess.run([sys.executable, "-c", child, mode], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "ours" in proc.stdout and ("native to 1" in proc.stdout) == native_on_stdout, (mode, proc.stdout)
        assert "native to 2" not in proc.stdout and "TensorRT wrote to stderr (or stdout): native to" in proc.stderr


ADOPTS = textwrap.dedent("""
    import json, sys
    from trt_backend.tensorrt import flavor
    description = json.loads(sys.argv[1])
    assert flavor.adopt("auto", description)
    adopted = flavor.load_flavor("auto")
    print("BEFORE", adopted.name in sys.modules)
    print("SAME", flavor.described(adopted) == description)
    print("LOADS", adopted.module.Logger is not None, adopted.name in sys.modules)
""")


def test_a_tensorrt_described_by_another_process_answers_as_its_import_would() -> None:
    """A build's head start imports TensorRT in a child process and describes it; the build takes
    that description instead of importing TensorRT again. It answers every feature question
    trt-backend asks as the import does, and the module loads on the first question beyond it."""
    import json
    import re

    from trt_backend.tensorrt import flavor

    here = flavor.described(flavor.load_flavor("auto"))
    proc = subprocess.run([sys.executable, "-c", ADOPTS, json.dumps(here)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "BEFORE False" in proc.stdout and "SAME True" in proc.stdout and "LOADS True True" in proc.stdout
    assert not flavor.adopt("auto", here)  # (loaded here already: nothing taken)
    assert not flavor.adopt("auto", [here[0], here[1], here[2], here[3][:-1]])  # (not every feature answered)
    # every feature the code asks about is in the description
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    asked = set()
    for folder, _, files in os.walk(os.path.join(root, "trt_backend")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    asked.update(re.findall(r'\.has\("([A-Za-z_][A-Za-z_0-9.]*)"\)', f.read()))
    assert asked - {"X.Y"} <= set(flavor.FEATURES), asked - set(flavor.FEATURES)


def test_an_engine_holding_a_plugin_of_ours_registers_it_before_loading_where_it_runs_through_python(
        monkeypatch) -> None:
    """Before TensorRT 10.9 our Python plugins run just in time from the engine, and deserializing
    an engine that holds one needs its creator registered in that process: only builds registered
    it, so a folder run, a serve replica or Session.load of such an engine could not load it. An
    engine naming our plugin namespace registers them first, on full TensorRT 10.6 to 10.8 only."""
    import types

    from trt_backend.tensorrt import flavor as fl

    registered: list[str] = []
    monkeypatch.setattr(fl, "register_plugins", lambda f: registered.append(f.version))
    engine = b"\x00plan\x00trt_backend\x00Resize\x001\x00"
    for name, version, expected in (("tensorrt", "10.7.0.23", True), ("tensorrt", "10.6.0", True),
                                    ("tensorrt", "10.9.0.34", False), ("tensorrt", "10.5.0", False),
                                    ("tensorrt_rtx", "1.7.1.116", False)):
        flavor = fl.Flavor(name, version, types.ModuleType(name))
        assert fl.plugins_for_engine(flavor, engine) is expected, version
        assert fl.plugins_for_engine(flavor, b"\x00plan without plugins\x00") is False
    assert registered == ["10.7.0.23", "10.6.0"]
    assert fl.version_tuple("10.13.0.35") == (10, 13, 0, 35) and fl.version_tuple("11.1.0.post1") == (11, 1, 0)
