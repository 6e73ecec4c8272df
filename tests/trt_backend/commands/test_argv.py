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


def _argparse_options(command: str) -> tuple[set[str], set[str]]:
    """(options that take a value, flags) of ``command`` as argparse defines them."""
    from trt_backend import cli

    parser = cli.build_parser(command)
    choices = next(a.choices for a in parser._actions if isinstance(a.choices, dict))
    actions = choices[command]._actions
    values = {o for a in actions if a.nargs != 0 for o in a.option_strings}
    flags = {o for a in actions if a.nargs == 0 for o in a.option_strings}
    return values, flags


def test_the_options_read_before_argparse_are_the_commands_own() -> None:
    """Each option the early readers know is one its command defines, with a value where argparse
    takes one and as a flag where argparse takes none (a flag read as taking a value would eat the
    model's path)."""
    from trt_backend import cli
    from trt_backend.commands._argv import BUILD_LINE_FLAGS, BUILD_LINE_VALUES

    for command, known_values, known_flags in (("build", BUILD_LINE_VALUES, BUILD_LINE_FLAGS),
                                               ("inspect", cli._INSPECT_VALUES, cli._INSPECT_FLAGS)):
        values, flags = _argparse_options(command)
        assert known_values <= values, (command, known_values - values)
        assert known_flags <= flags, (command, known_flags - flags)
