"""A session's plan (executors and derived profiles on top of the partition) and the checks that
let a saved plan's profiles be reused: same segments, same graph, same input profiles."""
from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import onnx

from partitioner import Plan
from partitioner.model import weightless_copy
from trt_backend.errors import ProfileError
from trt_backend.profiles import Profile, profiles_from_json, profiles_to_json


@dataclass
class SessionPlan(Plan):
    """A :class:`Plan` that also knows, per segment, its executor and profiles; its JSON adds
    ``"executor"`` and ``"profiles"`` to every segment, and ``"input_profiles"`` and
    ``"fingerprint"`` (of the normalized graph, weights excluded) at the top."""

    executors: list[str] = field(default_factory=list)
    input_profiles: list[Profile] = field(default_factory=list)
    segment_profiles: dict[int, list[Profile]] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan, **extra: Any) -> SessionPlan:
        return cls(**{f.name: getattr(plan, f.name) for f in fields(Plan)}, **extra)

    @functools.cached_property
    def fingerprint(self) -> str | None:
        return model_fingerprint(self.model.proto) if self.model is not None else None

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["fingerprint"] = self.fingerprint
        d["input_profiles"] = profiles_to_json(self.input_profiles)
        for seg, executor in zip(d["segments"], self.executors):
            seg["executor"] = executor
            seg["profiles"] = profiles_to_json(self.segment_profiles.get(seg["id"], []))
        return d


_SHAPE_DTYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})


def model_fingerprint(proto: onnx.ModelProto) -> str:
    """Hash of what decides the plan and the shapes: the graph, with initializers reduced to
    dtype and dims except small integer ones (shape constants). New weights keep it."""
    copy = weightless_copy(proto)
    for t in copy.graph.initializer:
        if t.data_type not in _SHAPE_DTYPES or t.ByteSize() > 4096:
            dims, dtype, name = list(t.dims), t.data_type, t.name
            t.Clear()
            t.name, t.data_type = name, dtype
            t.dims.extend(dims)
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()[:16]


def read_saved(saved: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    if isinstance(saved, Mapping):
        return dict(saved)
    text = os.fspath(saved)
    if not text.lstrip().startswith("{"):
        try:
            with open(text, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ProfileError(f"cannot read saved plan {saved}: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"saved plan is not JSON: {e}") from None
    except RecursionError:
        raise ProfileError("saved plan is not a plan JSON: nested deeper than one is") from None
    if not isinstance(data, dict) or "segments" not in data:
        raise ProfileError("saved plan has no segments: not a plan JSON")
    return data


def check_saved(saved: Mapping[str, Any], plan: Plan, user: list[Profile]) -> None:
    """The model must still plan the same, and given profiles must be those of the saved plan."""
    keys = ("id", "backend", "nodes", "copies", "inputs", "outputs")
    now = [{k: d.get(k, []) for k in keys} for d in (s.to_dict() for s in plan.segments)]
    then = [{k: s.get(k, [] if k == "copies" else None) for k in keys} for s in saved["segments"]]
    src = plan.model.source if plan.model is not None else plan.model_name
    again = "; drop the saved plan to derive profiles again"
    fp = saved.get("fingerprint")
    now_fp = model_fingerprint(plan.model.proto) if fp and plan.model is not None else None
    if now_fp is not None and fp != now_fp:
        made_for = saved.get("model")
        if made_for and not _same_file(made_for, src):  # another model's plan: said so, before how its segments differ
            raise ProfileError(f"the saved plan was made for {made_for} (fingerprint {fp}), not for {src} "
                               f"(fingerprint {now_fp}){again}")
    if len(now) != len(then):
        raise ProfileError(f"the plan of {src} changed since its profiles were derived: {len(then)} segment(s) then, "
                           f"{len(now)} now{again}")
    for a, b in zip(then, now):
        for key in keys[1:]:
            if a[key] != b[key]:
                raise ProfileError(f"the plan of {src} changed since its profiles were derived: segment {b['id']} "
                                   f"{key} were {_short(a[key])}, now {_short(b[key])}{again}")
    if now_fp is not None and fp != now_fp:
        raise ProfileError(f"the model {src} changed since its profiles were derived (fingerprint {fp}, now "
                           f"{now_fp}){again}")
    if user and _strip(user) != _strip(profiles_from_json(saved.get("input_profiles", []))):
        raise ProfileError("the profiles given differ from those the saved plan's profiles were derived from; "
                           "drop the saved plan or pass its profiles")


def _same_file(a: Any, b: Any) -> bool:
    """Whether two names of models name one file (a path given relative once, absolute once)."""
    if a == b:
        return True
    try:
        return os.path.samefile(str(a), str(b))
    except OSError:  # one is gone, or is no path ("<ModelProto>"): by their names
        return os.path.realpath(str(a)) == os.path.realpath(str(b))


def _short(value: Any, shown: int = 8) -> str:
    """A list as text, its first ``shown`` items and how many in all where longer."""
    if isinstance(value, list) and len(value) > shown:
        return f"[{', '.join(map(str, value[:shown]))}, ... ({len(value)} in all)]"
    return str(value)


def saved_segment_profiles(saved: Mapping[str, Any]) -> dict[int, list[Profile]]:
    derived: dict[int, list[Profile]] = {}
    for s in saved["segments"]:
        if s.get("backend") == "tensorrt":
            if "profiles" not in s:
                raise ProfileError(f"saved plan has no profiles for TensorRT segment {s.get('id')}")
            derived[int(s["id"])] = profiles_from_json(s["profiles"])
    return derived


def _strip(profiles: Sequence[Profile]) -> list[dict[str, tuple[Any, Any, Any]]]:
    return [{n: (tp.min, tp.opt, tp.max) for n, tp in p.items() if tp.source != "static"} for p in profiles]
