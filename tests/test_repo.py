"""The README's commands are the ones CI and users run."""
from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = read("README.md")
    commands = re.findall(r"```bash\n(.+?)\n```", readme)
    assert len(commands) >= 2
    demo, tests = commands[0], commands[1]
    assert demo.endswith("trt-backend demo")
    test_cmd = tests.split("&&")[-1].strip()
    assert test_cmd == "python -m pytest -q tests"
    ci_lines = [line.strip() for line in read(".ci/run").splitlines()]
    assert test_cmd in ci_lines
    assert 'pip install -q -e ".[cpu,test]"' in read(".ci/run") and 'pip install -e ".[cpu,test]"' in tests
