"""`trt-backend serve`: bad input is one line and exit 1, before any Ray cluster starts, naming
the command line's flag (it named the Python field: ServeOptions.port)."""
from __future__ import annotations

import pytest

from trt_backend.cli import main


@pytest.mark.parametrize("argv, message", [
    (["serve", "/no/such/build"], "trt-backend: error: /no/such/build: no such build folder or model file"),
    (["serve", ".", "--port", "70000"],
     "trt-backend: error: --port must be a whole number in 0..65535, got 70000"),
    (["serve", ".", "--batch-wait-ms", "-1"],
     "trt-backend: error: --batch-wait-ms must be a finite number >= 0"),
    (["serve", ".", "--num-cpus", "-1"], "trt-backend: error: --num-cpus must be a finite number >= 0"),
])
def test_bad_serve_arguments_are_one_line(argv, message, capsys) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
