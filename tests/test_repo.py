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
    venv, activate, install, test_cmd = (step.strip() for step in tests.split("&&"))
    assert (venv, activate) == ("python3 -m venv .venv", ". .venv/bin/activate")
    assert (install, test_cmd) == ("sh tests/install.sh", "python -m pytest -q tests")
    ci_lines = [line.strip() for line in read(".ci/run").splitlines() if not line.lstrip().startswith("#")]
    # CI: a fresh venv, the same install, the gates, the same test command
    steps = [ci_lines.index(line) for line in ("python3 -m venv .ci-venv", ". .ci-venv/bin/activate", install,
                                               "ruff check .", "python -m mypy partitioner plugins trt_backend",
                                               test_cmd)]
    assert steps == sorted(steps)
    assert 'pip install -q -e ".[cpu,test,serve,dev]"' in read("tests/install.sh")


def test_ci_fails_on_a_skip_it_does_not_allow(tmp_path) -> None:
    """With CI set, a skip other than the gpu tests and the named platform gaps fails the run."""
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401\n")
    (tmp_path / "test_some.py").write_text(
        "import pytest\n\n"
        "def test_runs():\n    assert True\n\n"
        "def test_gpu():\n    pytest.skip('needs a usable CUDA device')\n\n"
        "def test_missing():\n    pytest.skip('no TensorRT flavor importable')\n")
    env = dict(os.environ, CI="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), *args],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    refused = run()
    assert refused.returncode == 1, refused.stdout[-1500:]
    assert "CI skips: 2 (gpu 1, locale 0, not allowed 1)" in refused.stdout
    assert "skipped and not allowed to be: test_some.py::test_missing" in refused.stdout
    allowed = run("-k", "not missing")
    assert allowed.returncode == 0, allowed.stdout[-1500:]
    env.pop("CI")
    assert run().returncode == 0  # outside CI a skip is a skip


def test_a_test_needing_what_only_the_install_script_installs_is_optional_and_counted(tmp_path) -> None:
    """Outside CI such a test skips and the run says how many did; under CI=1 it fails."""
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_runtest_logreport, pytest_sessionfinish\n"
        "__all__ = ['pytest_runtest_logreport', 'pytest_sessionfinish']\n")
    (tmp_path / "test_some.py").write_text(
        "from tests.helpers import skip_optional\n\n"
        "def test_runs():\n    assert True\n\n"
        "def test_needs_stubs():\n    skip_optional('tensorrt-stubs==10.13.*')\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    outside = run()
    assert outside.returncode == 0, outside.stdout[-1500:]
    assert "optional tests skipped: 1 (they need packages tests/install.sh installs)" in outside.stdout
    assert "1 passed, 1 skipped" in outside.stdout
    env["CI"] = "1"
    in_ci = run()
    assert in_ci.returncode == 1, in_ci.stdout[-1500:]
    assert "CI must install tensorrt-stubs==10.13.* (tests/install.sh)" in in_ci.stdout
    assert "optional tests skipped" not in in_ci.stdout
