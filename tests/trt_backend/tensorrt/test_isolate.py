"""``--isolate`` asks the TensorRT parser in a child process: when that process dies (here a
plugin claim, asked inside the child about the node the real TensorRT-RTX parser rejected, calls
``os.abort()``), the caller gets one ParserCrashError naming the signal, and lives on. Without
isolation the same claim takes the whole process down (checked in a subprocess)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass

import onnx
import pytest

from partitioner import PartitionOptions
from partitioner.capability import Claim
from trt_backend.cli import main
from trt_backend.data.demo import DEMO_PATH
from trt_backend.errors import ParserCrashError
from trt_backend.planning import make_plan

pytestmark = pytest.mark.usefixtures("oracle")  # needs a real TensorRT parser
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@dataclass(frozen=True)
class AbortingClaim:
    """A plugin claim that kills its process when asked (as a native crash in the parser would);
    module-level so it travels to the isolated planner by pickle."""

    name: str = "abort"

    def claim(self, node: onnx.NodeProto, model: object) -> Claim:
        os.abort()


class AbortingRegistry:
    """What the CLI's default plugin registry gives, with only the aborting claim."""

    def claims(self) -> tuple[AbortingClaim, ...]:
        return (AbortingClaim(),)

    def select(self, op_types: object) -> AbortingRegistry:
        return self


def test_a_parser_process_that_dies_is_one_error_and_the_caller_lives() -> None:
    options = PartitionOptions(plugins=(AbortingClaim(),))
    with pytest.raises(ParserCrashError, match=rf"demo\.onnx: the TensorRT parser crashed \(signal "
                                               rf"{int(signal.SIGABRT)}\) while checking capability"):
        make_plan(DEMO_PATH, options, isolate=True)
    # this process is alive and its parser still answers
    plan = make_plan(DEMO_PATH, PartitionOptions(), isolate=True)
    assert [s.backend for s in plan.segments] == ["tensorrt", "onnxruntime", "tensorrt"]


def test_isolate_on_the_command_line(monkeypatch, capsys) -> None:
    import trt_backend.planning as planning

    monkeypatch.setattr(planning, "default_registry", AbortingRegistry)  # (every door's shipped plugins)
    for command in (["inspect", DEMO_PATH, "--isolate"], ["run", DEMO_PATH, "--isolate", "--emulate"]):
        assert main(command) == 1
        err = capsys.readouterr().err.strip()
        assert err == (f"trt-backend: error: {DEMO_PATH}: the TensorRT parser crashed (signal "
                       f"{int(signal.SIGABRT)}) while checking capability"), err


def test_without_isolation_the_same_claim_kills_the_process() -> None:
    code = ("from partitioner import PartitionOptions\n"
            "from trt_backend.planning import make_plan\n"
            "from tests.trt_backend.tensorrt.test_isolate import AbortingClaim\n"
            f"make_plan({DEMO_PATH!r}, PartitionOptions(plugins=(AbortingClaim(),)))\n"
            "print('survived')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGABRT and "survived" not in proc.stdout


def test_isolation_works_from_a_script_without_a_main_guard(tmp_path) -> None:
    """A plain script (no ``if __name__ == "__main__":``) planning in isolation: the child is a
    fresh interpreter that does not import the script again (a multiprocessing child did, failed
    in its bootstrapping, and the script waited forever)."""
    script = tmp_path / "plan_it.py"
    script.write_text("import trt_backend\n"
                      f"plan = trt_backend.make_plan({DEMO_PATH!r}, isolate=True)\n"
                      "print([s.backend for s in plan.segments])\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['tensorrt', 'onnxruntime', 'tensorrt']"
