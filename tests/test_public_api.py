"""The public surface: every name of ``trt_backend.__all__`` resolves (lazily loaded ones too),
and every exception class the packages define is reachable from ``trt_backend.errors``, the one
place users catch from (Polygraphy's ``exception`` module)."""
from __future__ import annotations

import importlib
import inspect
import os
import pkgutil

import partitioner
import plugins
import trt_backend
import trt_backend.errors as errors


def test_every_public_name_resolves() -> None:
    assert len(trt_backend.__all__) == len(set(trt_backend.__all__))
    for name in trt_backend.__all__:
        value = getattr(trt_backend, name)
        assert value is not None, name
        if isinstance(value, type) or callable(value):
            assert value.__name__ == name, f"trt_backend.{name} is {value.__name__}"
    for name in ("Session", "SessionOptions", "RunOptions", "OrtOptions", "PartitionOptions", "BuildOptions",
                 "TensorProfile", "compare", "run_bench", "load", "build", "make_plan", "TrtBackendError"):
        assert name in trt_backend.__all__, name
    assert sorted(dir(trt_backend)) == sorted(set(dir(trt_backend)))


def _defined_exceptions() -> dict[str, type]:
    """Public exception classes defined in any module of the three packages, by qualified name."""
    found: dict[str, type] = {}
    for pkg in (partitioner, plugins, trt_backend):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__ \
                        and not name.startswith("_"):
                    found[f"{module.__name__}.{name}"] = obj
    return found


def test_every_exception_is_reachable_from_errors() -> None:
    found = _defined_exceptions()
    assert len(found) >= 25  # the walk saw the packages' errors
    unreachable = sorted(q for q, cls in found.items() if getattr(errors, cls.__name__, None) is not cls)
    assert unreachable == [], "add these to trt_backend/errors.py (define them there, or re-export them)"
    assert sorted(errors.__all__) == sorted({cls.__name__ for cls in found.values()})


def test_trt_backend_defines_its_exceptions_only_in_errors() -> None:
    """One place for every error a user can catch: modules raise them, errors.py defines them."""
    elsewhere = sorted(q for q, cls in _defined_exceptions().items()
                       if q.startswith("trt_backend.") and cls.__module__ != "trt_backend.errors")
    assert elsewhere == []


def test_user_errors_share_one_root() -> None:
    """Everything the CLI turns into a one-line message derives from TrtBackendError."""
    roots = {name: cls for name, cls in vars(errors).items() if inspect.isclass(cls) and issubclass(cls, Exception)}
    outside = sorted(n for n, cls in roots.items() if not issubclass(cls, errors.TrtBackendError))
    assert outside == ["SpecError"]  # a ValueError inside the Resize plugin: becomes the reason a claim is declined
    assert issubclass(errors.ProfileError, errors.OptionsError)
    assert os.path.basename(errors.__file__) == "errors.py"
