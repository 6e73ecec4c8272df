"""The tree is the pipeline: every folder of trt_backend/ is one stage and imports only point down.

Read from the modules' own import statements (every one, inside functions too, so an import
cannot dodge the rule by being lazy) and their ``lazy_module("...")`` declarations: no module
imports a module of a higher layer, and the import graph of the package's modules has no cycle."""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("partitioner", "plugins", "trt_backend")

# Bottom to top; a module may import its own layer or lower ones. Keys are module names or
# package prefixes (the longest matching prefix decides).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("partitioner", "plugins"),
    ("trt_backend.errors", "trt_backend._files", "trt_backend._forked", "trt_backend._lazy", "trt_backend._progress",
     "trt_backend._version", "trt_backend.data"),
    ("trt_backend.tensorrt", "trt_backend.ort", "trt_backend.gpu"),
    # (a Session's options sit with the stages they are made of: the compile path reads them)
    ("trt_backend.planning", "trt_backend.profiles", "trt_backend.engines", "trt_backend.runners",
     "trt_backend.session.options"),
    ("trt_backend.compiler", "trt_backend.artifacts"),
    ("trt_backend.session",),
    ("trt_backend.onnx_backend", "trt_backend.bench", "trt_backend.accuracy", "trt_backend.export",
     "trt_backend.serve"),
    ("trt_backend.commands", "trt_backend.cli", "trt_backend.__main__"),
)
# The facade re-exports from every layer (lazily, by name); it is nobody's dependency.
FACADE = "trt_backend"


def layer_of(module: str) -> int:
    best, level = "", -1
    for k, keys in enumerate(LAYERS):
        for key in keys:
            if (module == key or module.startswith(key + ".")) and len(key) > len(best):
                best, level = key, k
    if level < 0:
        raise AssertionError(f"{module} is in no layer of tests/test_layers.py: add its folder to LAYERS")
    return level


def package_modules() -> dict[str, str]:
    """module name -> file path, for every module of the three packages."""
    out = {}
    for pkg in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, pkg)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def imports_of(module: str, path: str, known: set[str]) -> set[str]:
    """Package modules ``module`` imports anywhere in its source (``from a import b`` counts as
    ``a.b`` when that is a module, else ``a``)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_pkg = path.endswith("__init__.py")
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_module" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.add(node.args[0].value)  # (a module loaded on first use is imported all the same)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts if is_pkg else parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m.split(".")[0] in PACKAGES and m in known}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = package_modules()
    known = set(modules)
    return {m: imports_of(m, p, known) - {m} for m, p in modules.items()}


def test_every_module_has_a_layer(graph) -> None:
    for module in graph:
        if module != FACADE:
            layer_of(module)


def test_imports_point_down(graph) -> None:
    upward = []
    for module, deps in sorted(graph.items()):
        if module == FACADE:
            continue
        for dep in sorted(deps):
            if dep != FACADE and layer_of(dep) > layer_of(module):
                upward.append(f"{module} (layer {layer_of(module)}) imports {dep} (layer {layer_of(dep)})")
    assert upward == [], "imports pointing up:\n" + "\n".join(upward)


def test_no_import_cycles(graph) -> None:
    """Depth-first search; a back edge is a cycle, reported as its modules in order."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(graph.get(m, ())):
            if dep == FACADE:
                continue
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[m] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_only_the_facade_imports_the_facade(graph) -> None:
    """``from trt_backend import X`` inside the package would tie a stage to every other one."""
    offenders = sorted(m for m, deps in graph.items() if FACADE in deps and m != FACADE
                       and not m.startswith(("trt_backend.commands", "trt_backend.cli")))
    assert offenders == []


def test_the_checker_sees_a_violation(tmp_path) -> None:
    """The rule bites: an upward import and a cycle written to a scratch tree are both found."""
    low = tmp_path / "low.py"
    low.write_text("from trt_backend.session.session import Session\nimport trt_backend.ort.options\n"
                   "_later = lazy_module('trt_backend.serve.app')\n")
    known = {"trt_backend.session.session", "trt_backend.ort.options", "trt_backend.serve.app"}
    deps = imports_of("trt_backend.ort.sessions", str(low), known)
    assert deps == {"trt_backend.session.session", "trt_backend.ort.options", "trt_backend.serve.app"}
    assert layer_of("trt_backend.session.session") > layer_of("trt_backend.ort.sessions")


def test_package_imports_sit_at_module_top() -> None:
    """An import of the package's own modules inside a function only hides a circle (and leaves
    signatures typed ``Any``); the heavy runtimes are the ones that load lazily."""
    nested = []
    for module, path in sorted(package_modules().items()):
        if not module.startswith("trt_backend"):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or "."]
                if isinstance(node, ast.ImportFrom) and node.level:
                    names = ["." * node.level + (node.module or "")]
                nested += [f"{module}:{node.lineno} {n}" for n in names
                           if n.startswith(".") or n.split(".")[0] in PACKAGES]
    assert nested == []


def test_the_pipeline_has_one_compile_path() -> None:
    """Planning, profile derivation, precision and builds are one function's job: no class
    anywhere derives from the runtime Session (a planning door built that way disagreed with the
    runtime), and session/ holds the runtime only (the session, its options, its feeds)."""
    subclasses = []
    for module, path in sorted(package_modules().items()):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases}
                if "Session" in bases:
                    subclasses.append(f"{module}.{node.name}")
    assert subclasses == []
    session_modules = sorted(m for m in package_modules() if m.startswith("trt_backend.session."))
    assert len(session_modules) + 1 <= 5, session_modules  # (+ its __init__)
    assert "trt_backend.compiler" in package_modules()
