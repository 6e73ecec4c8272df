"""The command line read before argparse loads (build's cache index and head start, inspect's early
parse): what it takes, and every form it leaves to argparse."""
from __future__ import annotations

from trt_backend.commands._argv import scan

VALUES = frozenset({"--shapes", "--flavor"})
FLAGS = frozenset({"--no-plugins"})


def test_options_flags_and_the_model_come_back_in_order_without_verbosity() -> None:
    line = scan(["-v", "inspect", "m.onnx", "--shapes", "x:1x3", "-q", "--flavor=tensorrt_rtx", "--no-plugins"],
                "inspect", VALUES, FLAGS)
    assert line == [(None, "m.onnx"), ("--shapes", "x:1x3"), ("--flavor", "tensorrt_rtx"), ("--no-plugins", None)]
    assert scan(["inspect"], "inspect", VALUES, FLAGS) == []


def test_any_other_command_line_is_left_to_argparse() -> None:
    for argv in (["build", "m.onnx"], ["inspect", "m.onnx", "--isolate"], ["inspect", "a.onnx", "b.onnx"],
                 ["inspect", "m.onnx", "--shapes"], ["inspect", "m.onnx", "-x"],
                 ["inspect", "m.onnx", "--no-plugins=1"], ["-v"], []):
        assert scan(argv, "inspect", VALUES, FLAGS) is None, argv
