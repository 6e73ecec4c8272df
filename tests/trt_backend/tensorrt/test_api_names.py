"""The TensorRT names trt-backend uses exist: in the installed tensorrt_rtx module, in the text of
tensorrt-stubs 10.13 for full TensorRT 10 (tests/install.sh installs it; its .pyi is parsed as text
here, since as shipped it does not parse under mypy), and in full TensorRT 11's Python bindings
(the tensorrt-cu13-bindings wheel, whose compiled module cannot load without TensorRT's
libraries: the names are read from its string table, where pybind11 keeps every class, method
and enum member name). And the code uses no unlisted name."""
from __future__ import annotations

import ast
import importlib.metadata
import os
import re

import pytest

from tests.helpers import skip_optional
from trt_backend.tensorrt import api_names as api_surface
from trt_backend.tensorrt.api_names import (
    CALLBACKS,
    COMMON,
    RTX_ONLY,
    TENSORRT_ONLY,
    missing_in_module,
)

PACKAGE_DIR = os.path.dirname(os.path.dirname(api_surface.__file__))  # trt_backend/


def _require_ci(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must install {what}")
    pytest.skip(f"{what} not installed")


@pytest.fixture(scope="module")
def rtx():
    try:
        import tensorrt_rtx
    except ImportError:
        _require_ci("tensorrt-rtx-cu13")
    return tensorrt_rtx


@pytest.fixture(scope="module")
def stubs() -> dict[str, set[str]]:
    """Class path -> member names, from tensorrt-stubs' .pyi text; '' holds module-level names."""
    try:
        dist = importlib.metadata.distribution("tensorrt-stubs")
    except importlib.metadata.PackageNotFoundError:
        skip_optional("tensorrt-stubs==10.13.*")
    assert dist.version.startswith("10.13"), dist.version
    bindings = str(dist.locate_file("tensorrt_bindings/tensorrt.pyi"))
    package = str(dist.locate_file("tensorrt/__init__.pyi"))
    with open(bindings, encoding="utf-8") as f:
        table = parse_stub(f.read())
    with open(package, encoding="utf-8") as f:
        table[""] |= parse_stub(f.read())[""]
    return table


_DEF = re.compile(r"^( *)(?:class|def) +(\w+)|^( *)(\w+) *(?::|=)(?!=)")


def parse_stub(text: str) -> dict[str, set[str]]:
    """Members by class path, skipping docstrings; ``from x import Name`` and ``__all__`` count
    as module-level names. Callback methods (documented in docstrings) land under
    ``"<class>#doc"``."""
    table: dict[str, set[str]] = {"": set()}
    stack: list[tuple[int, str]] = []
    in_doc = False
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        quotes = line.count('"""')
        if in_doc:
            in_doc = quotes % 2 == 0
            doc_def = re.match(r"\s*def +(\w+)\(", line)
            if doc_def and stack:
                table.setdefault(stack[-1][1] + "#doc", set()).add(doc_def.group(1))
            continue
        if quotes % 2 == 1:
            in_doc = True
            continue
        if not line.strip() or line.lstrip().startswith(("#", "@")):
            continue
        while stack and indent <= stack[-1][0]:
            stack.pop()
        if indent == 0:
            imported = re.match(r"from \S+ import (\w+)(?: as (\w+))?$", line)
            if imported:
                table[""].add(imported.group(2) or imported.group(1))
            if line.startswith("__all__"):
                table[""].update(re.findall(r"'(\w+)'", line))
        m = _DEF.match(line)
        if not m:
            continue
        name = m.group(2) or m.group(4)
        owner = stack[-1][1] if stack else ""
        if not stack or indent == stack[-1][0] + 4:
            table.setdefault(owner, set()).add(name)
        if line.lstrip().startswith("class "):
            path = f"{owner}.{name}" if owner else name
            table.setdefault(path, set())
            stack.append((indent, path))
    return table


@pytest.fixture(scope="module")
def trt11() -> tuple[str, bytes, str]:
    """(version, the compiled bindings' bytes, the package's Python text) of tensorrt-cu13-bindings."""
    try:
        dist = importlib.metadata.distribution("tensorrt-cu13-bindings")
    except importlib.metadata.PackageNotFoundError:
        _require_ci("tensorrt-cu13-bindings (setup.py's test extra)")
    assert dist.version.startswith("11."), dist.version
    folder = str(dist.locate_file("tensorrt_bindings"))
    binary = next(os.path.join(folder, f) for f in os.listdir(folder) if f.startswith("tensorrt") and f.endswith(".so"))
    with open(binary, "rb") as f:
        data = f.read()
    with open(os.path.join(folder, "__init__.py"), encoding="utf-8") as source:
        text = source.read()
    return dist.version, data, text


def _missing_in_trt11(trt11: tuple[str, bytes, str], surface: api_surface.SurfaceMap) -> list[str]:
    """Names of ``surface`` whose owner or member is neither a string of the compiled bindings
    (NUL-terminated; the linker may share a string's tail with a longer one) nor defined or
    imported by the package's __init__.py."""
    _, data, text = trt11

    def known(name: str) -> bool:
        return (name.encode() + b"\0" in data
                or re.search(rf"^(?:def|class)\s+{name}\b|^{name}\s*=|\bimport .*\b{name}\b", text, re.M) is not None)

    missing = []
    for name in api_surface.dotted(surface):
        if not all(known(part) for part in name.split(".") if not part.startswith("__")):
            missing.append(name)
    return missing


def _missing_in_stubs(stubs: dict[str, set[str]], surface: api_surface.SurfaceMap) -> list[str]:
    return [f"{owner}.{m}" if owner else m for owner, members in surface.items() for m in members
            if m not in stubs.get(owner, set())]


def test_common_names_in_tensorrt_rtx(rtx) -> None:
    assert missing_in_module(rtx, COMMON) == []


def test_rtx_only_names_in_tensorrt_rtx(rtx) -> None:
    assert missing_in_module(rtx, RTX_ONLY) == []


def test_tensorrt_only_names_are_absent_from_rtx(rtx) -> None:
    """They are listed apart because RTX lacks them; one that RTX gains moves to COMMON."""
    absent = set(missing_in_module(rtx, TENSORRT_ONLY))
    assert absent == set(api_surface.dotted(TENSORRT_ONLY))


def test_common_and_tensorrt_only_names_in_stubs(stubs) -> None:
    assert _missing_in_stubs(stubs, COMMON) == []
    assert _missing_in_stubs(stubs, TENSORRT_ONLY) == []


def test_rtx_only_names_are_absent_from_stubs(stubs) -> None:
    assert all(n in _missing_in_stubs(stubs, RTX_ONLY) for n in api_surface.dotted(RTX_ONLY))


def test_common_names_in_tensorrt_11_bindings(trt11) -> None:
    assert _missing_in_trt11(trt11, COMMON) == [], f"not in TensorRT {trt11[0]}"
    assert _missing_in_trt11(trt11, CALLBACKS) == []


def test_names_full_tensorrt_11_dropped_are_not_in_its_bindings(trt11) -> None:
    """TensorRT 11 removed weak typing (BuilderFlag.FP16); the RTX-only runtime API (runtime
    caches, engine validity, compute capabilities) is not there either: all are feature-detected."""
    absent = set(_missing_in_trt11(trt11, TENSORRT_ONLY)) | set(_missing_in_trt11(trt11, RTX_ONLY))
    assert {"BuilderFlag.FP16", "Runtime.get_engine_validity", "IRuntimeConfig.create_runtime_cache",
            "IBuilderConfig.set_compute_capability", "ComputeCapability.SM75"} <= absent, absent


def test_callbacks_documented_in_stubs(stubs, rtx) -> None:
    for owner, methods in CALLBACKS.items():
        assert hasattr(rtx, owner), owner
        known = stubs.get(owner, set()) | stubs.get(owner + "#doc", set())
        assert [m for m in methods if m not in known] == [], owner


def test_stub_parser_sees_members_and_skips_docstrings(stubs) -> None:
    assert {"FP16", "TF32", "STRIP_PLAN"} <= stubs["BuilderFlag"]
    assert "Members" not in stubs["BuilderFlag"] and "ERROR" in stubs["ILogger.Severity"]
    assert {"execute_async_v3", "set_tensor_address"} <= stubs["IExecutionContext"]
    assert "engine_host_code_allowed" in stubs["Runtime"] and "__version__" in stubs[""]


# ---------------------------------------------------------------- the code uses only listed names

def _code_names() -> dict[str, set[str]]:
    """file -> dotted TensorRT names found in it: ``trt.A.B`` attribute chains and the string
    arguments of ``has("A.B")`` / ``_require(flavor, "A.B", ...)`` calls."""
    found: dict[str, set[str]] = {}
    for root, _, files in os.walk(PACKAGE_DIR):
        for fname in files:
            if not fname.endswith(".py") or fname == "api_names.py":
                continue
            path = os.path.join(root, fname)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            names = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "_parent", None), ast.Attribute):
                    chain = _chain(node)
                    if chain and chain[0] == "trt" and len(chain) > 1:
                        names.add(".".join(p for p in chain[1:] if not p.startswith("__")))
                if isinstance(node, ast.Call):
                    func = node.func
                    fname_ = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    if fname_ in ("has", "_require"):
                        for arg in node.args:
                            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                                    and re.fullmatch(r"[A-Za-z_]\w*(\.\w+)*", arg.value):
                                names.add(arg.value)
                for child in ast.iter_child_nodes(node):
                    child._parent = node  # type: ignore[attr-defined]
            if names:
                found[os.path.relpath(path, PACKAGE_DIR)] = names
    return found


def _chain(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def test_code_uses_only_listed_names() -> None:
    listed = api_surface.all_names()
    found = _code_names()
    assert os.path.join("engines", "builder.py") in found and os.path.join("tensorrt", "flavor.py") in found
    unlisted = {f: sorted(n for n in names if n and n not in listed) for f, names in found.items()}
    assert {f: n for f, n in unlisted.items() if n} == {}, "add these to trt_backend/tensorrt/api_names.py"


def test_plugin_tensorrt_names(rtx, stubs) -> None:
    """Names the plugins list for the TensorRT module itself (``tensorrt.plugin`` is theirs)."""
    from plugins.resize import tensorrt as module

    names = tuple(module.TENSORRT_API)
    assert names
    by_owner: dict[str, list[str]] = {}
    for name in names:
        owner, _, member = name.rpartition(".")
        by_owner.setdefault(owner, []).append(member)
    surface = {k: tuple(v) for k, v in by_owner.items()}
    assert missing_in_module(rtx, surface) == [] and _missing_in_stubs(stubs, surface) == []
