"""Derived profiles: every TensorRT segment input that is not a model input gets one, from symbolic
shape inference where its dims resolve to model-input dims, otherwise by calibration: the whole
model runs in ONNX Runtime at each profile's min, opt and max shapes and the boundary shapes (and
values of shape tensors) are recorded."""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from partitioner import Model, Plan, Segment
from partitioner.errors import TrtBackendError
from trt_backend._progress import progress
from trt_backend.errors import CalibrationError
from trt_backend.ort.random_data import random_feed
from trt_backend.profiles.bounds import Bound, DimBounds
from trt_backend.profiles.node_arg import NodeArg
from trt_backend.profiles.profile import (
    CALIBRATED,
    SYMBOLIC,
    Profile,
    Shape,
    TensorProfile,
    covering_profile,
)

log = logging.getLogger(__name__)

# A data-dependent dim the graph does not bound gets this many times what calibration saw as its max.
OBSERVED_WIDEN = 4

# (op_type, input position) read as a shape or a shape-like value by TensorRT.
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Slice": (1, 2, 3, 4),
    "Range": (0, 1, 2), "Resize": (2, 3), "Upsample": (1,), "Pad": (1,), "TopK": (1,), "OneHot": (1,),
    "Unsqueeze": (1,), "Squeeze": (1,), "Split": (1,), "NonMaxSuppression": (2,), "CenterCropPad": (1,),
}

# Ops through which a shape tensor is computed: an input of one of these is a shape tensor
# when its output is.
SHAPE_PASS = frozenset({"Concat", "Gather", "Cast", "Add", "Sub", "Mul", "Div", "Max", "Min", "Squeeze",
                        "Unsqueeze", "Slice", "Identity", "Where", "ReduceProd", "ReduceMax", "ReduceMin",
                        "Neg", "Abs", "Mod", "Floor", "Ceil", "Sum", "Clip"})


def shape_tensor_inputs(model: Model, segment: Segment) -> set[str]:
    """Segment inputs TensorRT takes as shape tensors (integer, rank <= 1, used as a shape)."""
    index = model.index
    nodes = model.proto.graph.node
    marked: set[str] = set()
    members = set(segment.members)
    for i in reversed([i for i in index.order if i in members]):
        node = nodes[i]
        passes = node.op_type in SHAPE_PASS and any(o in marked for o in node.output)
        for pos, name in enumerate(node.input):
            if name and (pos in SHAPE_INPUTS.get(node.op_type, ()) or passes):
                marked.add(name)
    return {n for n in segment.inputs if n in marked and _small_int(index.types.get(n))}


def _small_int(tp: onnx.TypeProto | None) -> bool:
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return False
    tt = tp.tensor_type
    ints = (onnx.TensorProto.INT32, onnx.TensorProto.INT64)
    return tt.elem_type in ints and (not tt.HasField("shape") or len(tt.shape.dim) <= 1)


def _bindings(model: Model, profile: Profile) -> dict[str, tuple[int, int, int]]:
    """dim_param symbol of a model input -> (min, opt, max) under ``profile``; symbols bound
    to different ranges by different inputs are dropped."""
    out: dict[str, tuple[int, int, int]] = {}
    clash: set[str] = set()
    for vi in model.proto.graph.input:
        tp = profile.get(vi.name)
        if tp is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.WhichOneof("value") == "dim_param" and axis < len(tp.min):
                rng = (tp.min[axis], tp.opt[axis], tp.max[axis])
                if out.setdefault(d.dim_param, rng) != rng:
                    clash.add(d.dim_param)
    for sym in clash:
        del out[sym]
    return out


def symbolic_profile(tp: onnx.TypeProto | None, bindings: Mapping[str, tuple[int, int, int]]) -> TensorProfile | None:
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    lo, mid, hi = [], [], []
    for d in tp.tensor_type.shape.dim:
        which = d.WhichOneof("value")
        if which == "dim_value":
            rng = (int(d.dim_value),) * 3
        elif which == "dim_param" and d.dim_param in bindings:
            rng = bindings[d.dim_param]
        else:
            return None
        lo.append(rng[0])
        mid.append(rng[1])
        hi.append(rng[2])
    return TensorProfile(tuple(lo), tuple(mid), tuple(hi), SYMBOLIC)


Runner = Callable[[Sequence[str], Mapping[str, Any]], Sequence[Any]]


def derive_profiles(model: Model, plan: Plan, inputs: Sequence[NodeArg], input_profiles: Sequence[Profile],
                    overrides: Sequence[Profile], make_runner: Callable[[Sequence[str]], Runner],
                    seed: int = 0, samples: Sequence[Mapping[str, Any]] = ()) -> dict[int, list[Profile]]:
    """Profiles of every TensorRT segment's inputs, one per input profile. ``make_runner(names)``
    returns a callable running the whole model that also yields ``names`` (for calibration);
    ``samples`` are real feeds to calibrate with (see :func:`calibrate`)."""
    trt = plan.tensorrt_segments()
    if not trt or not input_profiles:
        return {s.id: [] for s in trt}
    shape_tensors = {s.id: shape_tensor_inputs(model, s) for s in trt}
    result: dict[int, list[Profile]] = {s.id: [] for s in trt}
    pending: list[set[str]] = []
    for k, prof in enumerate(input_profiles):
        binds = _bindings(model, prof)
        over = overrides[k] if k < len(overrides) else {}
        todo: set[str] = set()
        for seg in trt:
            entry: Profile = {}
            for name in seg.inputs:
                if name in prof:
                    entry[name] = prof[name]
                elif name in over:
                    entry[name] = over[name]
                # Small integer tensors are calibrated, not derived symbolically: TensorRT may read
                # one as a shape tensor, whose values its profile must then hold, where
                # shape_tensor_inputs' rules did not see it; whatever runs then also builds.
                elif name not in shape_tensors[seg.id] and not _small_int(model.index.types.get(name)) \
                        and (sym := symbolic_profile(model.index.types.get(name), binds)):
                    entry[name] = sym
                else:
                    todo.add(name)
            result[seg.id].append(entry)
        pending.append(todo)
    names = sorted(set().union(*pending))
    if names:
        seen = calibrate(model, names, inputs, input_profiles, make_runner, seed, samples,
                         set().union(*shape_tensors.values()))
        for k, todo in enumerate(pending):
            for seg in trt:
                for name in seg.inputs:
                    if name in todo:
                        result[seg.id][k][name] = seen[k][name]
    return result


# Data-dependent outputs with a known upper bound: op -> function(input values at max shapes)
# giving the largest size of the data-dependent dim (dim 0 for NMS, dim 1 for NonZero).
def _nms_bound(ins: Sequence[Any]) -> int:
    batches, classes, spatial = np.shape(ins[1])
    per_class = spatial
    if len(ins) > 2 and ins[2] is not None and np.size(ins[2]):
        per_class = min(spatial, max(0, int(np.asarray(ins[2]).reshape(-1)[0])))
    return int(batches * classes * per_class)


_BOUNDS: dict[str, tuple[int, Callable[[Sequence[Any]], int]]] = {
    "NonMaxSuppression": (0, _nms_bound),
    "NonZero": (1, lambda ins: int(np.size(ins[0]))),
    "Compress": (-1, lambda ins: int(np.size(ins[0]))),
    "Unique": (-1, lambda ins: int(np.size(ins[0]))),
}


def _bounded(model: Model, names: Sequence[str]) -> dict[str, tuple[int, str, list[str]]]:
    """Calibrated tensors made directly by an op with a known bound: name -> (dim, op, op inputs)."""
    out = {}
    for name in names:
        i = model.index.producer.get(name)
        node = model.proto.graph.node[i] if i is not None else None
        if node is not None and node.op_type in _BOUNDS and node.output[0] == name:
            out[name] = (_BOUNDS[node.op_type][0], node.op_type, [n for n in node.input])
    return out


def calibrate(model: Model, names: Sequence[str], inputs: Sequence[NodeArg], input_profiles: Sequence[Profile],
              make_runner: Callable[[Sequence[str]], Runner], seed: int = 0,
              samples: Sequence[Mapping[str, Any]] = (), shape_tensors: Collection[str] | None = None
              ) -> list[dict[str, TensorProfile]]:
    """Run the whole model at each profile's min/opt/max and record ``names``' shapes (and values,
    for integer tensors of rank <= 1). A sample whose shapes equal a profile's min, opt or max is
    run instead of random data there, and every sample widens the profile it falls in. One more
    run at opt shapes with other data finds dims that depend on the data; for outputs of
    NonMaxSuppression, NonZero, Compress and Unique their max is the op's bound. Random data
    comes from :mod:`trt_backend.ort.random_data`, the ``k``-th feed drawn with ``seed + k``.
    ``shape_tensors``: those of ``names`` a segment reads as a shape (see
    :func:`shape_tensor_inputs`); a widened value range of another is said at INFO, not as a
    warning (None: every small integer tensor is taken for one)."""
    log.info("%s: calibrating profiles of %d segment input(s) with ONNX Runtime", model.source, len(names))
    total = 3 * len(input_profiles)
    bounded = _bounded(model, names)
    fetch = list(dict.fromkeys(list(names) + [n for _, _, ins in bounded.values() for n in ins if n]))
    run = make_runner(fetch)
    drawn = 0  # random feeds drawn so far: the next one is seeded with seed + drawn
    stages = ("min", "opt", "max")

    def record(feeds: Mapping[str, Any], what: str, drawn: bool = True) -> dict[str, Any]:
        try:
            return dict(zip(fetch, run(fetch, feeds)))
        except TrtBackendError as e:
            at = ", ".join(f"{n} {'x'.join(map(str, s)) or '[]'}" for n, s in shapes(feeds).items())
            if not drawn:
                raise CalibrationError(f"cannot derive profiles for {', '.join(names)}: the model fails on the "
                                       f"input sample given ({what}: {at}): {e}") from None
            real = (f"none of the {len(samples)} real input sample(s) given has these shapes, which random values "
                    "stood in for: give one that does (a sample at each profile's min, opt and max shapes is run "
                    "instead of random values), or profiles whose min, opt and max the samples have") if samples else \
                ("give shapes the model runs at (--shapes, or --min/--opt/--max-shapes), these tensors profiles, or "
                 "real inputs to calibrate with (--inputs; in Python, calibration_feeds)")
            raise CalibrationError(f"cannot derive profiles for {', '.join(names)}: the calibration run at {what} "
                                   f"({at}, random values) failed ({e}); {real}") from None

    def shapes(feeds: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        return {n: tuple(np.shape(v)) for n, v in feeds.items() if isinstance(v, np.ndarray)}

    def random_feeds(want: Mapping[str, Shape]) -> dict[str, Any]:
        nonlocal drawn
        for arg in inputs:
            if arg.kind != "tensor" or arg.dtype is None or arg.name not in want:
                raise CalibrationError(f"cannot derive profiles for {', '.join(names)}: model input '{arg.name}' "
                                       f"({arg.type}) has no profile to calibrate with; give these tensors profiles")
        tensors = [(arg.name, arg.dtype, want[arg.name]) for arg in inputs]
        drawn += 1
        ranges = {arg.name: arg.int_range for arg in inputs if arg.int_range is not None}
        return dict(random_feed(tensors, seed + drawn - 1, ranges,  # type: ignore[arg-type]
                                what="calibration input"))

    out: list[dict[str, TensorProfile]] = []
    for k, prof in enumerate(input_profiles):
        runs: list[dict[str, Any]] = []
        for which in range(3):
            want = {n: (tp.min, tp.opt, tp.max)[which] for n, tp in prof.items()}
            progress("calibrating %d segment input(s): run %d/%d (profile %d %s shapes)", len(names),
                     3 * k + which + 1, total, k, stages[which])
            sample = next((s for s in samples if all(shapes(s).get(n, w) == w for n, w in want.items())), None)
            runs.append(record(sample if sample is not None else random_feeds(want),
                               f"profile {k} {stages[which]} shapes", sample is None))
        probe = _probe(run, fetch, prof, samples, random_feeds)
        extra = [record(s, f"calibration sample {j}", False) for j, s in enumerate(samples)
                 if covering_profile([prof], shapes(s)) == 0]
        found: dict[str, TensorProfile] = {}
        more = extra + ([probe] if probe is not None else [])
        graph_bounds = DimBounds(model, {n: tp.max for n, tp in prof.items()})
        for name in names:
            bound = None
            if name in bounded:
                dim, op, ins = bounded[name]
                # the op's bound is taken from its inputs at the max-shape run: exact only where
                # the graph bounds those inputs' dims; else (boxes that survived an earlier filter)
                # what calibration saw, which the widening below handles as such
                exact = all(graph_bounds.bound(t, d)[0] is not None for t in ins[:2] if t
                            for d in range(graph_bounds.rank(t) or 0))
                if exact:
                    bound = (dim, _BOUNDS[op][1]([runs[2].get(n) if n else None for n in ins]))
            traced = {d: graph_bounds.bound(name, d) for d in range(np.ndim(runs[1][name]))}
            value = np.asarray(runs[1][name])
            by_value = graph_bounds.value_bounds(name) if value.dtype.kind in "iu" and value.ndim <= 1 else None
            found[name] = _combine(name, [r[name] for r in runs], [r[name] for r in more],
                                   probe[name] if probe is not None else None, bound, traced, by_value,
                                   shape_tensors is None or name in shape_tensors)
        out.append(found)
    return out


def _probe(run: Runner, fetch: Sequence[str], prof: Profile, samples: Sequence[Mapping[str, Any]],
           random_feeds: Callable[[Mapping[str, Shape]], dict[str, Any]]) -> dict[str, Any] | None:
    """One more run at the opt shapes with other data (another sample of those shapes, else
    random data): dims that change then depend on the data. Best effort: None if it fails."""
    want = {n: tp.opt for n, tp in prof.items()}
    same = [s for s in samples if all(n in s and tuple(np.shape(s[n])) == w for n, w in want.items())]
    try:
        feeds = same[1] if len(same) > 1 else random_feeds(want)
        return dict(zip(fetch, run(fetch, feeds)))
    except TrtBackendError as e:
        log.info("data-dependence probe skipped: %s", e)
        return None


def _combine(name: str, seen: Sequence[Any], more: Sequence[Any] = (), probe: Any = None,
             bound: tuple[int, int] | None = None, traced: Mapping[int, Bound] | None = None,
             value_bounds: Sequence[Bound] | None = None, shape_tensor: bool = True) -> TensorProfile:
    """min/max over every run, opt from the run at the profile's opt shapes (``seen[1]``). Dims
    that differ between that run and ``probe`` (same shapes, other data), or that the graph
    derives from a data-dependent op (``traced``: per dim, the graph's bound and whether such an
    op lies on the way, see :class:`~trt_backend.profiles.bounds.DimBounds`), depend on the data:
    their min becomes 0 and their max the producing op's ``bound`` (dim, size) or the graph's,
    else what calibration saw times OBSERVED_WIDEN, flagged ``observed`` (with a warning). The
    values of a small integer tensor (a shape tensor) get the same treatment per element:
    elements that differ with the data, or that ``value_bounds`` (see
    :meth:`DimBounds.value_bounds`) traces to a data-dependent dim, range from 0 to the graph's
    bound, else to what calibration saw times OBSERVED_WIDEN (a warning where it is a
    ``shape_tensor``: one a segment reads as a shape; TensorRT reads another's values, a Gather's
    indices, as data, and its profile's values are not used)."""
    traced = traced or {}
    arrays = [np.asarray(v) for v in list(seen) + list(more)]
    shapes = [tuple(int(d) for d in a.shape) for a in arrays]
    if len({len(s) for s in shapes}) != 1:
        raise CalibrationError(f"tensor '{name}' changes rank between calibration runs ({shapes}); "
                               "TensorRT needs a fixed rank: exclude its consumers or give it a profile")
    lo = tuple(min(d) for d in zip(*shapes))
    hi = tuple(max(d) for d in zip(*shapes))
    dependent: tuple[int, ...] = ()
    if probe is not None:
        dependent = tuple(i for i, (a, b) in enumerate(zip(shapes[1], np.shape(probe))) if a != b)
    dependent = tuple(sorted(set(dependent) | {d for d, (_, through) in traced.items() if through}))
    bounded_dims: dict[int, int] = {d: v for d, (v, _) in traced.items() if v is not None}
    if bound is not None:
        dim = bound[0] % len(lo) if lo else 0
        dependent = tuple(sorted(set(dependent) | {dim}))
        bounded_dims[dim] = max(bound[1], bounded_dims.get(dim, 0))
    observed: tuple[int, ...] = ()
    if dependent:
        lo = tuple(0 if i in dependent else d for i, d in enumerate(lo))
        observed = tuple(d for d in dependent if d not in bounded_dims)
        hi = tuple(max(h, bounded_dims[i]) if i in bounded_dims else
                   max(1, h) * OBSERVED_WIDEN if i in observed else h for i, h in enumerate(hi))
        if observed:
            log.warning("tensor '%s' has data-dependent dim(s) %s that the graph does not bound: its profile allows "
                        "%s..%s, %dx what calibration saw; give it a profile if the data can go further", name,
                        list(observed), lo, hi, OBSERVED_WIDEN)
    values = None
    if arrays[0].dtype.kind in "iu" and arrays[0].ndim <= 1 and len({a.size for a in arrays}) == 1:
        vals = [tuple(int(x) for x in a.reshape(-1)) for a in arrays]
        values = _value_range(name, vals, probe, value_bounds, shape_tensor)
    return TensorProfile(lo, shapes[1], hi, CALIBRATED, values, dependent, observed)


def _value_range(name: str, vals: Sequence[tuple[int, ...]], probe: Any, value_bounds: Sequence[Bound] | None,
                 shape_tensor: bool = True) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(min, opt, max) values of a shape tensor: see :func:`_combine`."""
    lo = [min(v) for v in zip(*vals)]
    hi = [max(v) for v in zip(*vals)]
    opt = vals[1]
    varying: set[int] = set()
    if probe is not None and np.size(probe) == len(opt):
        varying = {i for i, (a, b) in enumerate(zip(opt, np.asarray(probe).reshape(-1))) if a != int(b)}
    known = list(value_bounds) if value_bounds is not None and len(value_bounds) == len(opt) else []
    varying |= {i for i, (_, through) in enumerate(known) if through}
    widened = []
    for i in sorted(varying):
        lo[i] = min(lo[i], 0)
        limit = known[i][0] if known else None
        if limit is not None:
            hi[i] = max(hi[i], limit)
        else:
            hi[i] = max(1, hi[i]) * OBSERVED_WIDEN
            widened.append(i)
    if widened:
        (log.warning if shape_tensor else log.info)(
            "%s '%s' has data-dependent value(s) at %s that the graph does not bound: its profile allows %s..%s, "
            "%dx what calibration saw; give it a profile if the data can go further",
            "shape tensor" if shape_tensor else "integer tensor (no node of its segment reads it as a shape that "
            "this derivation knows of; its values matter where TensorRT reads it as one)", name, widened,
            tuple(lo), tuple(hi), OBSERVED_WIDEN)
    return tuple(lo), opt, tuple(hi)
