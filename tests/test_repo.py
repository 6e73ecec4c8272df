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


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    """The README stays a front page; it and the docs link only to files that exist."""
    readme = read("README.md")
    assert len(readme.splitlines()) <= 200
    docs = sorted(os.listdir(os.path.join(ROOT, "docs")))
    pages = ["README.md", "CONTRIBUTING.md"] + [os.path.join("docs", name) for name in docs]
    checked = 0
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", read(page)):
            if "://" in target:
                continue
            path = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), target))
            assert os.path.exists(path), f"{page} links to {target}, which does not exist"
            checked += 1
    assert checked >= 10


def test_the_version_is_written_once() -> None:
    """setup.py reads the version from trt_backend/_version.py instead of holding its own."""
    import subprocess
    import sys

    from trt_backend._version import __version__

    assert "version=_version()" in read("setup.py") and not re.search(r'version="\d', read("setup.py"))
    got = subprocess.run([sys.executable, os.path.join(ROOT, "setup.py"), "--version"], cwd=str(ROOT),
                         capture_output=True, text=True, check=True).stdout.split()
    assert got[-1] == __version__


def _imports(path: str) -> list[str]:
    """Every module an ``import`` or ``from ... import`` statement in ``path`` names, at any depth
    (imports inside functions count)."""
    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _python_files(folder: str) -> list[str]:
    found = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        found += [os.path.join(dirpath, f) for f in files if f.endswith(".py")]
    return sorted(found)


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:])


def test_tests_and_benchmarks_do_not_import_each_other() -> None:
    """No test imports ``benchmarks``; no benchmark imports a test module (``tests/**/test_*.py``),
    and neither does another test module: what they share lives in ``tests.support``, which
    benchmarks may import."""
    tests, benches = _python_files("tests"), _python_files("benchmarks")
    wrong = [f"{os.path.relpath(p, ROOT)}: {n}" for p in tests for n in _imports(p)
             if n == "benchmarks" or n.startswith("benchmarks.") or _is_test_module(n)]
    wrong += [f"{os.path.relpath(p, ROOT)}: {n}" for p in benches for n in _imports(p) if _is_test_module(n)]
    assert not wrong, "\n".join(wrong)
    # the walk sees what it should: benchmarks do use tests.support, and the rule's own check bites
    assert any(n.startswith("tests.support") for p in benches for n in _imports(p))
    assert _is_test_module("tests.trt_backend.session.test_graphs") and not _is_test_module("tests.support.graphs")


def test_benchmarks_folder_holds_timing_scripts_and_two_subfolders() -> None:
    """benchmarks/ holds the timing scripts and their README; conformance/ and device/ each hold
    their own scripts and a README that names every one of them."""
    top = os.path.join(ROOT, "benchmarks")
    entries = {e for e in os.listdir(top) if not e.startswith(".") and e != "__pycache__"}
    assert {e for e in entries if os.path.isdir(os.path.join(top, e))} == {"conformance", "device"}
    assert {e for e in entries if not os.path.isdir(os.path.join(top, e)) and not e.endswith(".py")} == {"README.md"}
    for folder in ("benchmarks", "benchmarks/conformance", "benchmarks/device"):
        readme = read(f"{folder}/README.md")
        scripts = [e for e in os.listdir(os.path.join(ROOT, folder)) if e.endswith((".py", ".sh"))]
        assert scripts
        missing = [s for s in scripts if s not in readme]
        assert not missing, f"{folder}/README.md does not name {missing}"


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


def test_every_command_line_option_is_described_in_the_docs() -> None:
    """Each long option a command's --help lists is described in the documentation (docs/*.md or
    the README): options the help listed and no page described (bench --rounds, compare
    --error-quantile, serve --host) were found by users reading both."""
    import argparse

    from trt_backend.cli import COMMANDS, build_parser

    docs = "\n".join(open(os.path.join(ROOT, "docs", name), encoding="utf-8").read()
                     for name in sorted(os.listdir(os.path.join(ROOT, "docs"))) if name.endswith(".md"))
    docs += open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    missing = []
    for command in COMMANDS:
        parser = build_parser(command)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help" and not re.search(re.escape(option) + r"(?![\w-])",
                                                                                     docs):
                    missing.append(f"{command} {option}")
    assert missing == []
