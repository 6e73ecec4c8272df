"""Plans by what they were made from: with a cache folder (``--cache-dir``, ``cache_dir=``),
planning a model file planned before takes the plan from there instead of asking TensorRT's
parser again, the types a probe run learned instead of running the model again, and, where the
same input profiles were given, the TensorRT segments' derived profiles instead of deriving them.

An entry is ``<cache_dir>/plans/<key>.json``, written whole by rename: the plan (as its JSON),
the learned types (by how each was learned, as serialized TypeProtos) and the derived profiles by
the profiles they were derived from. Its key is made of what decides the plan:

- the model file's SHA-256 and its external data files' (the build cache's digests, with the file
  status check that skips reading an unchanged file);
- the partition options as planning resolves them (plugins included), the TensorRT flavor with
  its version and parser version, the installed ONNX Runtime's version (probe runs and profile
  derivation run it) and the highest IR version it accepts, the shapes a probe run uses;
- trt-backend's version and the SHA-256 of its sources.

The model itself is still loaded and normalised (segments are cut from it); a hit checks that the
plan fits it (its node names, the types learned) and is a miss otherwise. A damaged entry is
logged, removed and a miss. Profiles derived with real calibration feeds are not kept."""
from __future__ import annotations

import base64
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from partitioner import PartitionOptions, Plan
from partitioner.cost import BoundaryCost
from trt_backend._files import json_sha256, write_atomic
from trt_backend._version import __version__
from trt_backend.artifacts.build_cache import BuildCache, jsonable, source_digest
from trt_backend.errors import TensorRTUnavailableError
from trt_backend.ort.probe import ProbeShapes, probe_key
from trt_backend.ort.sessions import installed_version, max_ir_version
from trt_backend.planning import learned_types, load_normalized, priced, with_shipped_plugins
from trt_backend.profiles import Profile, profiles_from_json, profiles_to_json
from trt_backend.tensorrt import early_parse
from trt_backend.tensorrt.flavor import load_flavor

log = logging.getLogger(__name__)

PLAN_CACHE_FORMAT = 1
PLANS = "plans"


def plan_entry(cache_dir: str, model_path: str, options: PartitionOptions, flavor: str,
               shapes: ProbeShapes = ()) -> PlanEntry | None:
    """The entry under ``cache_dir`` of planning the file ``model_path`` with ``options`` and the
    parser of ``flavor`` (probe runs at ``shapes``), kept or not; None where its key cannot be told
    (a file that cannot be read, a flavor that is not installed: planning names the problem)."""
    builds = BuildCache(cache_dir)  # (its digests of model files, shared)
    try:
        model = builds.model_digest(model_path)
    except OSError as e:
        log.debug("no plan cache key for %s: %s", model_path, e)
        return None
    parser = [flavor]  # ("none": every node goes to ONNX Runtime)
    if flavor != "none":
        early = early_parse.pending(model_path, flavor)  # (the CLI's child imported it: not imported here)
        found = early.tensorrt() if early is not None else None
        if found is None:
            try:
                flv = load_flavor(flavor)
            except TensorRTUnavailableError:
                return None  # (planning says so, or plans without TensorRT with a warning: nothing to keep)
            found = (flv.name, flv.version, flv.parser_version)
        parser += list(found)
    options = with_shipped_plugins(options)
    material = {"plan_cache_format": PLAN_CACHE_FORMAT, "trt_backend": __version__, "source": source_digest(),
                "model": model, "options": jsonable(options), "parser": parser, "onnx": onnx.__version__,
                "onnxruntime": installed_version(), "max_ir_version": max_ir_version(),
                "shapes": [[[name, list(dims)] for name, dims in run] for run in probe_key(shapes)]}
    key = json_sha256(material, default=repr)
    return PlanEntry(os.path.join(os.path.abspath(cache_dir), PLANS, key + ".json"), model_path,
                     options.qdq_rewrite, shapes, options.boundary_cost)


class PlanEntry:
    """One plan cache entry (a file ``path``): the plan of ``model_path`` and its derived profiles.
    ``boundary_cost``: the partition options' (its plan's boundaries are priced with it again)."""

    def __init__(self, path: str, model_path: str, qdq_rewrite: str, shapes: ProbeShapes,
                 boundary_cost: BoundaryCost | None) -> None:
        self.path, self.model_path, self.qdq_rewrite, self.shapes = path, model_path, qdq_rewrite, shapes
        self.boundary_cost = boundary_cost
        # the entry as this object last read, wrote or dropped it: one compile reads the file once
        self._held: tuple[dict[str, Any] | None] | None = None

    def _read(self) -> dict[str, Any] | None:
        if self._held is None:
            self._held = (self._read_file(),)
        return self._held[0]

    def _read_file(self) -> dict[str, Any] | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                entry = json.load(f)
            if not isinstance(entry, dict) or entry.get("format") != PLAN_CACHE_FORMAT:
                raise ValueError("not a plan cache entry of this format")
            if not isinstance(entry.get("profiles", {}), dict):
                raise ValueError("its profiles are not a mapping")
            return entry
        except FileNotFoundError:
            return None
        except (ValueError, RecursionError) as e:  # (JSON that does not parse, or is not an entry)
            self._drop(str(e))
            return None
        except OSError as e:  # Unreadable here (permissions): a miss, the entry left as it is.
            log.debug("plan cache entry %s not read (%s)", self.path, e)
            return None

    def _drop(self, why: str) -> None:
        log.warning("plan cache entry %s unusable (%s); planning again", self.path, why)
        self._held = (None,)
        try:
            os.remove(self.path)
        except OSError:
            pass

    def _write(self, entry: dict[str, Any]) -> None:
        self._held = (entry,)
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            write_atomic(self.path, json.dumps(entry, separators=(",", ":")))
        except OSError as e:
            log.warning("plan cache: %s not written (%s)", self.path, e)

    def load(self) -> Plan | None:
        """The plan kept here with its model loaded (the learned types given, not probed for),
        or None on a miss."""
        start = time.perf_counter()
        entry = self._read()
        if entry is None:
            return None
        try:
            learned = {how: {name: onnx.TypeProto.FromString(base64.b64decode(text)) for name, text in types.items()}
                       for how, types in entry["types"].items()}
            plan = Plan.from_dict(entry["plan"])
        except (KeyError, TypeError, ValueError, AttributeError, DecodeError) as e:
            self._drop(f"unreadable: {e}")
            return None
        model = load_normalized(self.model_path, self.shapes, self.qdq_rewrite, learned=learned)
        if [n.name for n in model.proto.graph.node] != [n.name for n in plan.nodes] or model.learned != plan.learned:
            self._drop("its plan does not fit the model")
            return None
        # (the key is the content: the same bytes at another path are this model, named as given)
        plan.model_name, plan.model, plan.cached = model.source, model, True
        priced(plan, self.boundary_cost, self.shapes)
        plan.seconds = time.perf_counter() - start
        log.info("%s: plan taken from the plan cache (%s)", self.model_path, self.path)
        return plan

    def store(self, plan: Plan) -> None:
        """Keep ``plan`` (made with its model) here; a folder that cannot be written is only logged."""
        assert plan.model is not None
        types = {how: {name: base64.b64encode(tp.SerializeToString()).decode("ascii") for name, tp in by.items()}
                 for how, by in learned_types(plan.model).items()}
        self._write({"format": PLAN_CACHE_FORMAT, "plan": plan.to_dict(), "types": types, "profiles": {}})

    def profiles(self, given: Any, plan: Plan) -> dict[int, list[Profile]] | None:
        """The profiles of ``plan``'s TensorRT segments derived from ``given`` (JSON-able: the input
        profiles and whatever else derivation depends on) for the plan kept here, or None."""
        found = ((self._read() or {}).get("profiles") or {}).get(json_sha256(jsonable(given), default=repr))
        if found is None:
            return None
        try:
            derived = {int(k): profiles_from_json(v) for k, v in found.items()}
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self._drop(f"unreadable profiles: {e}")
            return None
        if set(derived) != {s.id for s in plan.tensorrt_segments()}:
            self._drop("its profiles are not the plan's TensorRT segments'")
            return None
        return derived

    def store_profiles(self, given: Any, derived: Mapping[int, Sequence[Profile]]) -> None:
        """Keep the profiles derived from ``given`` beside the plan kept here."""
        entry = self._read()
        if entry is None:
            return
        entry.setdefault("profiles", {})[json_sha256(jsonable(given), default=repr)] = {
            str(k): profiles_to_json(v) for k, v in derived.items()}
        self._write(entry)
