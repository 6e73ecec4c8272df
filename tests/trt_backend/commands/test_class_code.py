"""The command line keeps the compiled code of its dataclasses' methods between runs: a second
run compiles none of the texts the first kept, and its classes are the same classes (the same
fields, equality, ordering, freezing, repr). Real processes, the file where Python would put
bytecode (``PYTHONPYCACHEPREFIX``); a damaged file costs only the time, and a process told to
write no bytecode writes none."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Some of our dataclasses (plain, frozen, ordered, with defaults and factories), used as the
# command line uses them, then what the module counted.
SCRIPT = """
import dataclasses, sys
from trt_backend.commands import _class_code
_class_code.use()
from partitioner.plan import Segment
from trt_backend.engines.report import BuildEvent, BuildReport
from trt_backend.session.options import SessionOptions
a, b = Segment(0, "tensorrt", (1, 2), ("x",), ("y",)), Segment(0, "tensorrt", (1, 2), ("x",), ("y",))
assert a == b and hash(a) == hash(b) and a != dataclasses.replace(a, id=1)
try:
    a.id = 3
    raise SystemExit("a frozen class took an assignment")
except dataclasses.FrozenInstanceError:
    pass
report = BuildReport("tensorrt_rtx 1")
assert report.segments == [] and report.segments is not BuildReport("x").segments
options = SessionOptions(precision="fp16")
assert options.build.precision == "fp16" and options == SessionOptions(precision="fp16")
print("REPR", repr(a), repr(BuildEvent(0, "built", 1, 1, 0.5)))


@dataclasses.dataclass
class Here:  # (a module without ``from __future__ import annotations``, as most libraries are)
    limit: int = 3
    name: "str | None" = None


import inspect, typing
print("ANNOTATIONS", Here.__init__.__annotations__, inspect.signature(Here), typing.get_type_hints(Here.__init__),
      BuildEvent.__init__.__annotations__)
_class_code.save()
print("COUNTS", *_class_code.counts(), _class_code.path())
"""


def _lines(prefix: str, script: str = SCRIPT, **env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**environ, "PYTHONPYCACHEPREFIX": prefix, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines())


def _run(prefix: str, **env: str) -> tuple[str, int, int, str]:
    lines = _lines(prefix, **env)
    taken, left, path = lines["COUNTS"].split(" ", 2)
    return lines["REPR"], int(taken), int(left), path


def test_the_classes_are_those_python_makes_annotations_and_all(tmp_path) -> None:
    """The code is compiled as ``dataclasses`` compiles it, not with this module's ``from
    __future__ import annotations``: a library's class keeps the types of its ``__init__``
    (what FastAPI and pydantic read), compiled here or taken from the file."""
    plain = _lines(str(tmp_path / "plain"), SCRIPT.replace("_class_code.use()", ""))["ANNOTATIONS"]
    assert "'limit': <class 'int'>" in plain and "'_type_" not in plain
    assert _lines(str(tmp_path / "kept"))["ANNOTATIONS"] == plain  # (compiled, and the file written)
    assert _lines(str(tmp_path / "kept"))["ANNOTATIONS"] == plain  # (taken from the file)


def test_a_second_run_takes_the_code_the_first_compiled_and_its_classes_are_the_same(tmp_path) -> None:
    first_repr, taken, _, path = _run(str(tmp_path))
    assert taken == 0 and path.startswith(str(tmp_path)) and os.path.getsize(path) > 0
    second_repr, taken, left, _ = _run(str(tmp_path))
    assert taken > 50 and left == 0  # (everything the first run compiled: nothing new to keep)
    assert second_repr == first_repr
    assert first_repr.startswith("Segment(id=0, backend='tensorrt', nodes=(1, 2)")


@pytest.mark.parametrize("damage", ["not marshal", "a bit flipped", "no mark", "a pipe"])
def test_a_damaged_or_foreign_file_is_not_read_and_is_written_again(damage, tmp_path) -> None:
    """A file whose CRC-32 does not match (one bit flipped in its code), one without this
    format's mark (plain marshal data, as another format or Python would leave), one that is no
    regular file: not read, nothing run from it; the next run writes it again."""
    _, _, _, path = _run(str(tmp_path))
    with open(path, "rb") as f:
        data = bytearray(f.read())
    os.remove(path)
    if damage == "a pipe":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:
            if damage == "not marshal":
                f.write(b"\xe3 not marshal data")
            elif damage == "a bit flipped":
                data[-1000] ^= 0x20
                f.write(data)
            else:
                f.write(data[data.index(b"\n") + 1 + 4 + 4:])  # the marshal data alone
    _, taken, _, _ = _run(str(tmp_path))
    assert taken == 0
    if damage == "a pipe":
        os.remove(path)
        _run(str(tmp_path))
    assert _run(str(tmp_path))[1] > 50


def test_a_process_told_to_write_no_bytecode_writes_none(tmp_path) -> None:
    _, taken, left, path = _run(str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    assert taken == 0 and left > 50 and not os.path.exists(path)


def test_the_command_line_keeps_its_classes_code(tmp_path) -> None:
    """``trt-backend inspect`` of the demo model, as a process: the file is written at its end."""
    from trt_backend.data.demo import DEMO_PATH

    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-m", "trt_backend", "inspect", DEMO_PATH], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**environ, "PYTHONPYCACHEPREFIX": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    kept = [os.path.join(d, f) for d, _, files in os.walk(tmp_path) for f in files
            if f.startswith("_class_code.") and f.endswith(".marshal")]
    assert len(kept) == 1 and os.path.getsize(kept[0]) > 0
