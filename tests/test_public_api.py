"""The public surface: every name of ``trt_backend.__all__`` resolves (lazily loaded ones too),
and every exception class the packages define is reachable from ``trt_backend.errors``, the one
place users catch from (Polygraphy's ``exception`` module)."""
from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
from typing import Any

import pytest

import partitioner
import plugins
import trt_backend
import trt_backend.errors as errors


# The whole top-level surface, listed once here and checked against the facade both ways.
PUBLIC = {"__version__", "errors", "Session", "SessionOptions", "RunOptions", "BuildOptions", "PartitionOptions",
          "OrtOptions", "compile", "build", "load", "compare", "CompareOptions", "run_bench", "BenchOptions",
          "search_precision", "make_plan"}


def test_every_public_name_resolves() -> None:
    assert set(trt_backend.__all__) == PUBLIC
    assert len(trt_backend.__all__) == len(set(trt_backend.__all__))
    for name in trt_backend.__all__:
        value = getattr(trt_backend, name)
        assert value is not None, name
        if isinstance(value, type) or callable(value):
            assert value.__name__ == name, f"trt_backend.{name} is {value.__name__}"
    assert sorted(dir(trt_backend)) == sorted(set(dir(trt_backend)))
    assert issubclass(trt_backend.errors.TrtBackendError, Exception)


def test_every_subpackage_has_a_small_facade() -> None:
    """Each stage's package says what it offers in ``__all__``, and every name there resolves."""
    folder = os.path.dirname(trt_backend.__file__)
    for entry in sorted(os.listdir(folder)):
        if not os.path.isfile(os.path.join(folder, entry, "__init__.py")):
            continue
        package = importlib.import_module(f"trt_backend.{entry}")
        assert isinstance(package.__all__, list), entry
        assert len(package.__all__) <= 20, f"trt_backend.{entry} exposes {len(package.__all__)} names"
        for name in package.__all__:
            value = getattr(package, name)  # a listed name that does not resolve raises AttributeError
            if inspect.isclass(value) or inspect.isfunction(value):
                assert value.__module__.startswith("trt_backend."), f"trt_backend.{entry}.{name}: {value.__module__}"


def test_names_mean_one_thing() -> None:
    """A public name defined in two modules of the package would mean two things."""
    seen: dict[str, str] = {}
    clashes = []
    for info in pkgutil.walk_packages(trt_backend.__path__, "trt_backend."):
        if info.name.endswith("__main__") or info.ispkg:
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if name in seen and name not in ("register", "handle", "main"):
                clashes.append(f"{name}: {seen[name]} and {module.__name__}")
            seen.setdefault(name, module.__name__)
    assert clashes == []


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


def test_a_value_of_the_wrong_type_at_a_public_door_is_one_error_of_ours(tmp_path) -> None:
    """A number, bytes or a str where a public function wants a path, a list or a Session is an
    error of ours naming what was wanted, not Python's TypeError or AttributeError from deep
    inside (os.fspath, tuple(), a missing attribute)."""
    from trt_backend.data.demo import DEMO_PATH
    from trt_backend.export import from_build_folders, from_model, from_session

    calls = [
        (lambda: trt_backend.load(123), "a build folder must be a path (a str or os.PathLike), got int"),
        (lambda: trt_backend.Session.load(b"folder"), "a build folder must be a path (a str or os.PathLike), got "
                                                       "bytes"),
        (lambda: trt_backend.PartitionOptions(exclude_ops=123), "exclude_ops must be a list, got int"),
        (lambda: trt_backend.PartitionOptions(exclude_nodes=["a", 2]), "exclude_nodes must list names (str), got int"),
        (lambda: trt_backend.PartitionOptions(min_segment_size="3"), "min_segment_size must be a whole number >= 0"),
        (lambda: from_model(123, None), "the model (a model file, a build folder or a ModelProto) must be a path"),
        (lambda: from_build_folders(str(tmp_path)), "folders must be a list of build folders, got str"),
        (lambda: from_build_folders([7]), "a build folder must be a path (a str or os.PathLike), got int"),
        (lambda: from_session("model.onnx"), "from_session takes a trt_backend Session, got str"),
        (lambda: trt_backend.build(DEMO_PATH, 123), "out_dir must be a path (a str or os.PathLike), got int"),
        (lambda: trt_backend.compare(DEMO_PATH, feeds=123),
         "feeds must be a dict of input name -> array, or a list of them, got int"),
        (lambda: trt_backend.compare(DEMO_PATH, feeds=[{}, 5]),
         "feeds must be a list of dicts of input name -> array, got int 5 in it"),
    ]
    _each_one_error(calls)


def test_option_lists_of_the_wrong_type_are_one_error_of_ours() -> None:
    """The options' list fields took any iterable apart and ended in Python's TypeError for the
    rest (None, a number, an object)."""
    import trt_backend.export
    from trt_backend.bench.loop import BenchOptions
    from trt_backend.data.demo import DEMO_PATH

    calls = [
        (lambda: trt_backend.BuildOptions(keep_fp32_ops=None), "keep_fp32_ops must be a list of op types (str), got"),
        (lambda: trt_backend.BuildOptions(keep_fp32_ops=["Softmax", 3]), "keep_fp32_ops must be a list of op types"),
        (lambda: trt_backend.BuildOptions(compute_capabilities=object()), "compute_capabilities must be a list"),
        (lambda: trt_backend.BuildOptions(calibration_data=[], precision="int8"), "calibration_data must be a path"),
        (lambda: trt_backend.OrtOptions(providers=5), "providers must be a list of provider names, or of (name, "),
        (lambda: trt_backend.OrtOptions(disabled_optimizers=[1]), "disabled_optimizers must be a list of names"),
        (lambda: trt_backend.CompareOptions(tolerances=None), "tolerances must be a list of 'output:atol,rtol'"),
        (lambda: trt_backend.CompareOptions(checks=3), "checks must be a list of task checks"),
        (lambda: BenchOptions(baselines=None),  # type: ignore[arg-type]
         "baselines must be a list of names (str), got NoneType"),
        (lambda: trt_backend.export.from_model(DEMO_PATH, "junk"), "profiles must be a list of dicts"),
    ]
    _each_one_error(calls)


def _each_one_error(calls: list[tuple[Any, str]]) -> None:
    """Each call raises an error of ours in one line holding its message."""
    for call, message in calls:
        try:
            call()
        except errors.TrtBackendError as e:
            assert message in str(e) and "\n" not in str(e), (message, str(e))
        else:
            raise AssertionError(f"no error: {message}")


def test_every_options_class_hashes_pickles_copies_and_names_an_unknown_option() -> None:
    """Options are values: equal ones hash alike, and each survives pickling (a worker process)
    and deep copies. CompareOptions (its tolerances a read-only mapping), BenchOptions and
    ServeOptions could not be hashed, CompareOptions not pickled; RunOptions named an unknown
    keyword with Python's TypeError instead of the OptionsError listing its options."""
    import copy
    import pickle

    from trt_backend.accuracy.options import CompareOptions
    from trt_backend.bench.loop import BenchOptions
    from trt_backend.engines.options import BuildOptions
    from trt_backend.ort.options import OrtOptions
    from trt_backend.serve.options import ServeOptions
    from trt_backend.session.options import RunOptions, SessionOptions

    made = [CompareOptions(tolerances={"y": (1e-2, 1e-2)}, shapes={"x": (2, 4)}), BenchOptions(shapes={"x": (1, 4)}),
            ServeOptions(replicas=2), RunOptions(outputs_on_device=False), BuildOptions(precision="fp16"),
            OrtOptions(), SessionOptions(precision="fp16"), partitioner.PartitionOptions(min_segment_size=2)]
    for options in made:
        again = pickle.loads(pickle.dumps(options))
        assert again == options and hash(again) == hash(options), type(options).__name__
        assert copy.deepcopy(options) == options and {options: 1}[again] == 1
    assert CompareOptions(tolerances={"y": (1e-2, 1e-2)}) != CompareOptions(tolerances={"y": (1e-3, 1e-2)})
    import numpy as np

    fed = [BenchOptions(feeds={"x": np.arange(4.0)}) for _ in range(2)]  # (arrays hashed by their contents)
    assert hash(fed[0]) == hash(fed[1]) != hash(BenchOptions(feeds={"x": np.arange(5.0)}))
    with pytest.raises(errors.OptionsError, match=r"RunOptions has no option 'outputs_on_devce' \(its options: "
                                                  r"outputs_on_device, ort\)"):
        RunOptions(outputs_on_devce=True)  # type: ignore[call-arg]
