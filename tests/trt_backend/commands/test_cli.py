"""The CLI's dispatch: every subcommand is listed, only the one being run is imported, and a
command module that fails to import fails loudly instead of vanishing from the CLI."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import trt_backend.cli as cli
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
    assert loaded.split(",") == ["trt_backend.commands._args", "trt_backend.commands._shapes",
                                 "trt_backend.commands.inspect"]


def test_a_command_module_that_fails_to_import_fails_loudly(monkeypatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "broken", "a command whose module is missing")
    with pytest.raises(ModuleNotFoundError, match="trt_backend.commands.broken"):
        cli.main(["broken"])
    with pytest.raises(ModuleNotFoundError, match="trt_backend.commands.broken"):
        cli.build_parser()
