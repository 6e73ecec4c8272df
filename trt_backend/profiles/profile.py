"""Optimisation profiles: per tensor min/opt/max shapes (and values, for shape tensors).

The one profile type of trt_backend: users give them for model inputs (checked against the model
in :mod:`trt_backend.profiles.given`), the session derives them for segment inputs
(:mod:`trt_backend.profiles.derive`), the builder hands them to TensorRT and the engine cache keys
on them. A leaf: nothing here knows models or runtimes."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trt_backend.errors import ProfileError

log = logging.getLogger(__name__)

Shape = tuple[int, ...]
USER, STATIC, SYMBOLIC, CALIBRATED = "user", "static", "symbolic", "calibrated"
SAMPLES = "samples"  # a model input's profile made from the shapes of real samples given without one
SOURCES = (USER, SAMPLES, STATIC, SYMBOLIC, CALIBRATED)


@dataclass(frozen=True)
class TensorProfile:
    """Shape range of one tensor; ``values`` holds the min/opt/max contents of a shape tensor."""

    min: Shape
    opt: Shape
    max: Shape
    source: str = USER  # user | samples | static | symbolic | calibrated
    values: tuple[Shape, Shape, Shape] | None = None
    data_dependent: tuple[int, ...] = ()  # dims that change with the data alone
    # data-dependent dims whose max is what calibration saw, widened (the graph gave no bound)
    observed: tuple[int, ...] = ()

    def covers(self, shape: Sequence[int]) -> bool:
        return len(shape) == len(self.min) and all(lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max))

    def covers_values(self, values: Sequence[int]) -> bool:
        if self.values is None:
            return True
        lo, _, hi = self.values
        return len(values) == len(lo) and all(a <= v <= b for a, v, b in zip(lo, values, hi))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"min": list(self.min), "opt": list(self.opt), "max": list(self.max), "source": self.source}
        if self.values is not None:
            d["values"] = {"min": list(self.values[0]), "opt": list(self.values[1]), "max": list(self.values[2])}
        if self.data_dependent:
            d["data_dependent"] = list(self.data_dependent)
        if self.observed:
            d["observed"] = list(self.observed)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TensorProfile:
        v = d.get("values")
        values = (tuple(v["min"]), tuple(v["opt"]), tuple(v["max"])) if v else None
        return cls(tuple(d["min"]), tuple(d["opt"]), tuple(d["max"]), d.get("source", USER), values,
                   tuple(d.get("data_dependent", ())), tuple(d.get("observed", ())))

    def key_json(self) -> list[Any]:
        """What an engine depends on (engine cache keys): the shapes and shape-tensor values."""
        return [list(self.min), list(self.opt), list(self.max),
                [list(v) for v in self.values] if self.values is not None else None]


Profile = dict[str, TensorProfile]


def describe_profile(tp: TensorProfile) -> str:
    text = f"min {tp.min} opt {tp.opt} max {tp.max}"
    if tp.values is not None:
        text += f" (values min {tp.values[0]} max {tp.values[2]})"
    return text


def profiles_to_json(profiles: Sequence[Profile]) -> list[dict[str, Any]]:
    return [{name: tp.to_dict() for name, tp in p.items()} for p in profiles]


def profiles_from_json(data: Sequence[Mapping[str, Any]]) -> list[Profile]:
    return [{name: TensorProfile.from_dict(tp) for name, tp in p.items()} for p in data]


def leading_ranges(profiles: Sequence[Profile], names: Iterable[str]) -> list[dict[str, tuple[int, int]]]:
    """Per profile, the (min, max) its leading dim takes in each of the tensors ``names`` it
    profiles with a rank: what a batch dim must be one range of (Triton's and serve's batching)."""
    wanted = list(names)
    return [{n: (int(p[n].min[0]), int(p[n].max[0])) for n in wanted if n in p and p[n].min} for p in profiles]


def as_shape(value: Any, what: str) -> Shape:
    """``value`` as a shape (whole numbers >= 0); ProfileError naming ``what`` otherwise."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ProfileError(f"{what}: expected a shape (sequence of ints), got {value!r}")
    dims = list(value)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise ProfileError(f"{what}: shape dims must be whole numbers >= 0, got {tuple(dims)!r}")
    return tuple(int(d) for d in dims)


def as_values(value: Any, what: str) -> Shape:
    """``value`` as a shape tensor's contents (whole numbers of any sign: a Range's step, a
    Reshape's -1); ProfileError naming ``what`` otherwise."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ProfileError(f"{what}: expected a sequence of ints, got {value!r}")
    items = list(value)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in items):
        raise ProfileError(f"{what}: shape-tensor values must be whole numbers, got {tuple(items)!r}")
    return tuple(int(d) for d in items)


def tensor_profile(value: Any, what: str) -> TensorProfile:
    """A profile entry as a :class:`TensorProfile`. Takes a TensorProfile, ``(min, opt, max)``,
    one shape (min = opt = max), or ``{"min", "opt", "max"[, "values"][, "source"]}`` (``source``,
    as :meth:`TensorProfile.to_dict` writes it: "samples" for one made from real samples' shapes;
    default "user"); checked for equal
    ranks and min <= opt <= max (ProfileError naming ``what``)."""
    if isinstance(value, TensorProfile):
        tp = value
    elif isinstance(value, Mapping):
        missing = [k for k in ("min", "opt", "max") if k not in value]
        if missing:
            raise ProfileError(f"{what}: missing {', '.join(missing)} (give min, opt and max shapes)")
        values = value.get("values")
        if values is not None:
            if isinstance(values, Mapping):
                values = [values.get(k, ()) for k in ("min", "opt", "max")]
            values = tuple(as_values(v, f"{what} values") for v in values)
            if len(values) != 3 or len({len(v) for v in values}) != 1:
                raise ProfileError(f"{what}: values must be (min, opt, max) of one length, got {value['values']!r}")
            if not all(a <= b <= c for a, b, c in zip(*values)):
                raise ProfileError(f"{what}: values need min <= opt <= max in every element, got {values!r}")
        source = value.get("source", USER)
        if source not in SOURCES:
            raise ProfileError(f"{what}: source is one of {', '.join(SOURCES)} where one is given, got {source!r}")
        tp = TensorProfile(as_shape(value["min"], what), as_shape(value["opt"], what), as_shape(value["max"], what),
                           source, values)
    elif isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ProfileError(f"{what}: expected (min_shape, opt_shape, max_shape) or one shape, got {value!r}")
    else:
        items = list(value)
        if items and all(isinstance(d, (int, np.integer)) for d in items) or not items:
            fixed = as_shape(items, what)
            tp = TensorProfile(fixed, fixed, fixed)
        elif len(items) == 3:
            tp = TensorProfile(as_shape(items[0], what), as_shape(items[1], what), as_shape(items[2], what))
        else:
            raise ProfileError(f"{what}: expected (min_shape, opt_shape, max_shape) or one shape, got {value!r}")
    if not (len(tp.min) == len(tp.opt) == len(tp.max)):
        raise ProfileError(f"{what}: min {tp.min}, opt {tp.opt} and max {tp.max} differ in rank")
    if not all(a <= b <= c for a, b, c in zip(tp.min, tp.opt, tp.max)):
        raise ProfileError(f"{what}: need min <= opt <= max in every dim, got {describe_profile(tp)}")
    return tp


def covering_profile(profiles: Sequence[Profile], shapes: Mapping[str, Sequence[int]],
                     values: Mapping[str, Sequence[int]] | None = None) -> int | None:
    """Index of the first profile covering every shape (and shape-tensor value) given."""
    for k, prof in enumerate(profiles):
        if all(n not in prof or prof[n].covers(s) for n, s in shapes.items()) and \
                all(n not in prof or prof[n].covers_values(v) for n, v in (values or {}).items()):
            return k
    return None
