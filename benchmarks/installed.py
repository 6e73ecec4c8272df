"""The project as a user's installation has it, for the scripts that time our commands as
processes: pip compiles the bytecode of the packages it installs, and the command line's first
runs keep the compiled code of the dataclasses they make (``trt_backend.commands._class_code``), which
every later run takes instead of compiling it again. This environment may be told to write
neither (``PYTHONDONTWRITEBYTECODE``, which both honour), so :func:`as_installed` does both with
that variable removed before anything is timed."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def as_installed() -> None:
    """Compile the bytecode of our packages, then run ``trt-backend demo`` (plan, build, run) and
    ``trt-backend inspect`` once each on the bundled demo model (untimed): a user's first runs."""
    from trt_backend.data.demo import DEMO_PATH

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", "partitioner", "plugins", "trt_backend"], cwd=ROOT,
                   check=True, env=env)
    with tempfile.TemporaryDirectory(prefix="first_runs_") as tmp:
        for command in (["demo", "--out", os.path.join(tmp, "demo")], ["inspect", DEMO_PATH]):
            subprocess.run([sys.executable, "-m", "trt_backend", "-q", *command], cwd=ROOT, env=env,
                           capture_output=True, check=True)
