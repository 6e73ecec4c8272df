"""Model inputs and outputs as onnxruntime describes them, and feed validation.

Every check runs before any segment does: unknown or missing names, non-array values, wrong
dtype or rank, fixed dims, and shapes outside every profile all fail with one
:class:`FeedError` that names the input, what was expected and what was given."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trt_backend.errors import FeedError
from trt_backend.gpu.device import as_device_array
from trt_backend.ort.values import random_array
from trt_backend.profiles.node_arg import NodeArg, shape_text
from trt_backend.profiles.profile import Profile, describe_profile


def _given(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {tuple(value.shape)}"
    return type(value).__name__


class FeedValidator:
    """Checks a feed dict against the model's inputs and profiles; returns arrays ready to run."""

    def __init__(self, inputs: Sequence[NodeArg], outputs: Sequence[NodeArg], profiles: Sequence[Profile]) -> None:
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.profiles = list(profiles)
        self._by_name = {a.name: a for a in self.inputs}
        self._output_names = [a.name for a in self.outputs]
        self._output_set = set(self._output_names)

    def output_names(self, requested: Sequence[str] | None) -> tuple[str, ...]:
        if requested is None:
            return tuple(self._output_names)
        if isinstance(requested, str) or not isinstance(requested, Sequence):
            raise FeedError(f"output names must be a list of names or None, got {type(requested).__name__}")
        bad = [n for n in requested if not isinstance(n, str) or n not in self._output_set]
        if bad:
            raise FeedError(f"unknown output name(s) {', '.join(repr(b) for b in bad)}; "
                            f"the model's outputs are: {', '.join(self._output_names)}")
        return tuple(requested)

    def validate(self, feeds: Any) -> dict[str, Any]:
        """Checked and normalised feeds (numpy scalars become 0-d arrays)."""
        if not isinstance(feeds, Mapping):
            raise FeedError(f"feeds must be a dict of input name -> numpy array, got {type(feeds).__name__}")
        unknown = [k for k in feeds if k not in self._by_name]
        if unknown:
            raise FeedError(f"unknown input {', '.join(repr(k) for k in unknown)}; the model's inputs are: "
                            + ", ".join(f"'{a.name}' {a.type} {shape_text(a.shape)}" for a in self.inputs))
        missing = [a for a in self.inputs if a.name not in feeds]
        if missing:
            raise FeedError("missing input " + ", ".join(f"'{a.name}' (expected {a.type} of shape "
                                                         f"{shape_text(a.shape)})" for a in missing))
        out: dict[str, Any] = {}
        problems: list[str] = []
        for arg in self.inputs:
            value, problem = _check_value(arg, feeds[arg.name])
            if problem:
                problems.append(problem)
            out[arg.name] = value
        if problems:
            raise FeedError("; ".join(problems))
        self.check_profiles({n: tuple(v.shape) for n, v in out.items() if _is_array(v)})
        return out

    def check_profiles(self, shapes: Mapping[str, tuple[int, ...]]) -> int | None:
        """Index of the first profile covering every fed shape; FeedError when none does."""
        if not self.profiles:
            return None
        misses: list[tuple[int, str, tuple[int, ...]]] = []
        for k, profile in enumerate(self.profiles):
            bad = [(n, tuple(s)) for n, s in shapes.items() if n in profile and not profile[n].covers(s)]
            if not bad:
                return k
            misses.append((k, *bad[0]))
        names = {n for _, n, _ in misses}
        if len(names) == 1:
            name, got = misses[0][1], misses[0][2]
            raise FeedError(f"input '{name}': shape {got} is outside every profile: " + "; ".join(
                f"profile {k} allows {describe_profile(self.profiles[k][name])}" for k, _, _ in misses))
        raise FeedError("the feeds fit no profile: " + "; ".join(
            f"profile {k}: input '{n}' has shape {s}, allowed {describe_profile(self.profiles[k][n])}"
            for k, n, s in misses))


def _check_value(arg: NodeArg, value: Any) -> tuple[Any, str | None]:
    """(normalised value, problem or None) for one input."""
    kind = arg.kind
    if kind == "optional":
        if value is None:
            return None, None
        inner = arg.type[len("optional("):-1]
        kind = inner.split("(", 1)[0]
    if kind == "seq":
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, np.ndarray) for v in value):
            return value, f"input '{arg.name}': expected a list of numpy arrays ({arg.type}), got {_given(value)}"
        return list(value), None
    if kind == "map":
        if not isinstance(value, (dict, list)):
            return value, f"input '{arg.name}': expected a dict ({arg.type}), got {_given(value)}"
        return value, None
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if hasattr(value, "__cuda_array_interface__"):  # CuPy, PyTorch, pycuda: used in place, no copy

        value = as_device_array(value)
    elif not isinstance(value, np.ndarray):
        if _is_ort_value(value):
            return value, None  # already a runtime value; onnxruntime checks it
        return value, f"input '{arg.name}': expected a numpy array ({arg.type}), got {_given(value)}"
    if arg.dtype is not None and value.dtype != arg.dtype:
        if not (arg.dtype == np.dtype(object) and value.dtype.kind in "OU"):
            return value, (f"input '{arg.name}': expected dtype {arg.dtype} ({arg.type}), "
                           f"got {value.dtype} array of shape {tuple(value.shape)}")
    if arg.dtype == np.dtype(object) and value.dtype.kind == "U":
        value = value.astype(object)
    if arg.rank is not None:
        if value.ndim != arg.rank:
            return value, (f"input '{arg.name}': expected rank {arg.rank} (shape {shape_text(arg.shape)}), "
                           f"got shape {tuple(value.shape)}")
        for axis, (want, got) in enumerate(zip(arg.shape, value.shape)):
            if isinstance(want, int) and want != got:
                return value, (f"input '{arg.name}': dim {axis} must be {want} (shape {shape_text(arg.shape)}), "
                               f"got shape {tuple(value.shape)}")
    return value, None


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__")


def _is_ort_value(value: Any) -> bool:
    cls = type(value)
    return cls.__name__ == "OrtValue" and cls.__module__.startswith("onnxruntime")


def random_feeds(inputs: Sequence[NodeArg], shapes: Mapping[str, Sequence[int]], seed: int = 0) -> dict[str, Any]:
    """Seeded random tensors: floats in [0, 1), integers in [0, 3), random booleans, short strings.
    ``shapes`` gives the shape of every input whose shape is not fully fixed."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    for arg in inputs:
        if arg.kind != "tensor" or arg.dtype is None:
            raise FeedError(f"input '{arg.name}' is {arg.type}; random data is only made for tensors, "
                            "pass this input explicitly")
    missing = [a for a in inputs if a.name not in shapes and (a.rank is None or a.is_dynamic)]
    if missing:  # (all of them in one message, with a --shapes line to paste)
        example = ",".join(f"{a.name}:{'x'.join(str(d) if isinstance(d, int) else '1' for d in a.shape) or '1'}"
                           for a in missing)
        if len(missing) == 1:
            raise FeedError(f"input '{missing[0].name}' has dynamic shape {shape_text(missing[0].shape)}; give its "
                            f"shape (e.g. --shapes {example})")
        listed = ", ".join(f"'{a.name}' {shape_text(a.shape)}" for a in missing)
        raise FeedError(f"{len(missing)} inputs have dynamic shapes: {listed}; give their shapes (e.g. --shapes "
                        f"{example})")
    for arg in inputs:
        shape = tuple(int(d) for d in (shapes[arg.name] if arg.name in shapes else arg.shape))  # type: ignore[arg-type]
        feeds[arg.name] = random_array(arg.dtype, shape, rng, f"input '{arg.name}'")  # type: ignore[arg-type]
    return feeds


# ------------------------------------------------------------------ user profiles of model inputs


