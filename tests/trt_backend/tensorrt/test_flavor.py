"""Builders made from several threads at once. Making a builder takes a lock inside TensorRT and
logs through the Python logger it is given while holding it (a logger other than the first one
registered is announced), and the binding keeps the GIL while it waits for that lock: eight
threads making builders with Python loggers deadlocked here every time (the whole process, so
the check runs in a child process with a timeout). create_builder makes them one at a time."""
from __future__ import annotations

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
