"""Types shape inference could not give, learned by running the model in ONNX Runtime.

ONNX's shape inference knows nothing after an operator it has no rule for (``ai.onnx.ml`` ops,
custom ops), and every TensorRT candidate downstream then has an input of unknown rank, which
TensorRT cannot take. Running the model answers what inference could not: it runs on seeded random
inputs at the shapes it will be used at (each profile's min, opt and max shapes, where the caller
has profiles; else every dynamic input dim at 2 and then at 3), and the tensors' dtypes and ranks
are read off. A dim that is the same in every run is static, one that follows an input's named dim
is given that name, any other stays unknown: a static dim is written only where it held at every
shape tried (a text recognizer's width / 8 is 1 at widths 2 and 3, and 40 at 320). Tensors typed
only by the model's own value_info (``partitioner.model.DECLARED``) are checked the same way. The
partitioner records the tensors as learned (``partitioner.model.learn_types``); a probe that fails
is logged with the tensors it could not learn, whose consumers then stay on ONNX Runtime.

The model is not run where planning reads none of those types
(:func:`partitioner.rules.types_planning_reads`): only nodes that run on ONNX Runtime anyway
(``ai.onnx.ml``, custom domains) write and read them, with nothing TensorRT may take before or
after them. A large tree ensemble with its ZipMap is such a model, and its ONNX Runtime session
alone takes longer than the rest of planning."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from partitioner import Model
from partitioner.model import DECLARED, forget_types, learn_types, unknown_tensor_types
from partitioner.rules import Rules, types_planning_reads
from trt_backend._lazy import lazy_module
from trt_backend._progress import progress
from trt_backend.errors import TrtBackendError
from trt_backend.ort.sessions import tapped_session

# Loaded for a probe run only: a model whose types shape inference gives needs neither.
_options = lazy_module("trt_backend.ort.options")
_random_data = lazy_module("trt_backend.ort.random_data")

log = logging.getLogger(__name__)

HOW = "an ONNX Runtime probe run"
PROBE_DIMS = (2, 3)  # each dynamic input dim without a given shape, in the first and the second run
# The longest a probe run may take: it runs at small or given shapes, and a Loop with neither a trip
# count nor an end would run on (loading, and so inspect, would never end); a run stopped there is
# a probe that failed, said in its warning.
PROBE_SECONDS = 30.0

# Input shapes of the probe runs: one mapping (input name -> shape) per run.
ProbeShapes = Sequence[Mapping[str, tuple[int, ...]]]


def opt_shapes(shapes: ProbeShapes) -> list[Mapping[str, tuple[int, ...]]]:
    """The opt shapes of each profile in ``shapes`` as profiles give them (each one's min, opt and
    max shapes in turn, see :func:`trt_backend.profiles.profile_shapes`: three entries a profile);
    fewer than three entries are shapes given as they are, each its own."""
    return list(shapes[1::3]) if len(shapes) >= 3 else list(shapes)


def probe_key(shapes: ProbeShapes) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], ...]:
    """``shapes`` as a hashable value, each run once, in order (what ``Model.probe_shapes`` holds)."""
    runs = [tuple(sorted((n, tuple(int(d) for d in s)) for n, s in run.items())) for run in shapes]
    return tuple(dict.fromkeys(runs))


def learn_unknown_types(model: Model, shapes: ProbeShapes = ()) -> list[str]:
    """Learn the types of ``model``'s tensors of unknown dtype or rank, and check those typed by
    the model's value_info alone, by probe runs at ``shapes`` (see the module's docstring);
    returns the tensors learned. Nothing to learn, or nothing planning reads: no run at all.
    Types learned before at other shapes are learned again at these."""
    key = probe_key(shapes)
    wanted = set(model.index.consumers) | set(model.index.graph_outputs)
    again = [n for n, how in model.learned.items() if n in wanted and (how == DECLARED or
                                                                       (how == HOW and key != model.probe_shapes))]
    if not _planning_reads(model, unknown_tensor_types(model) + again):
        model.probe_shapes = key
        return []
    graph = model.proto.graph  # (a declared or learned graph output's type is on the output, not in value_info)
    before = {vi.name: (onnx.TypeProto.FromString(vi.type.SerializeToString()), model.learned[vi.name])
              for vi in list(graph.output) + list(graph.value_info) if vi.name in again}
    forget_types(model, again)  # The probe must not run the model with the types it checks.
    unknown = list(dict.fromkeys(unknown_tensor_types(model) + again))
    model.probe_shapes = key
    if not unknown:
        return []
    try:
        runs, symbols = _probe(model, unknown, key)
    except (TrtBackendError, _Unprobeable) as e:
        log.warning("%s: the types of %d tensor(s) are unknown after shape inference (%s) and could not be "
                    "learned by running the model (%s)%s; none of them can be a TensorRT segment's input (where "
                    "one would be, the nodes reading it run on ONNX Runtime)", model.source, len(unknown),
                    _names(unknown), e, " (it ran on random values at the profiles' shapes)" if key else
                    " (it ran on random values, with dynamic dims of 2 and 3: where the dims are what fails, "
                    "profile shapes, e.g. inspect, run or build --shapes, make it run at those)")
        _restore(model, before)
        return []
    types = {}
    for name in unknown:
        tp = _type_of(name, [r.get(name) for r in runs], symbols)
        if tp is not None:
            types[name] = tp
    missed = [n for n in unknown if n not in types]
    if missed:
        log.info("%s: probe runs did not show the type of %s", model.source, _names(missed))
    learn_types(model, types, HOW)
    _restore(model, {n: t for n, t in before.items() if n not in types})
    return list(types)


def _planning_reads(model: Model, names: Sequence[str]) -> bool:
    """Whether planning reads the type of any of ``names`` (see
    :func:`partitioner.rules.types_planning_reads`). Where it reads none (the model's ONNX-ML
    nodes and what only they read: a tree ensemble and its ZipMap), the probe would build an ONNX
    Runtime session of the whole model, which for a large tree ensemble takes longer than
    everything else planning does, to learn what nothing uses."""
    if not names:
        return False
    rules = Rules(functions=model.proto.functions)
    read = types_planning_reads(model.index, names, rules)
    if not read:
        log.info("%s: the types of %d tensor(s) are unknown after shape inference (%s), but only nodes that run "
                 "on ONNX Runtime anyway read them: the model is not run to learn them", model.source, len(names),
                 _names(names))
    return bool(read)


def _restore(model: Model, before: Mapping[str, tuple[onnx.TypeProto, str]]) -> None:
    """Give back the types a probe could not check (they were forgotten for its runs)."""
    for how in sorted({h for _, h in before.values()}):
        learn_types(model, {n: tp for n, (tp, h) in before.items() if h == how}, how)


class _Unprobeable(Exception):
    """The model's inputs cannot be made up (unknown rank or dtype, non-tensor inputs)."""


def _names(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _probe(model: Model, names: Sequence[str], key: Sequence[Sequence[tuple[str, tuple[int, ...]]]] = ()
           ) -> tuple[list[dict[str, Any]], list[dict[int, str]]]:
    """The values of ``names`` in one run per entry of ``key`` (input shapes; none: one run per
    PROBE_DIMS entry), and per run the input dim names by value (a dim of that value in that run
    may be the named one)."""
    # No graph optimizations: a probe reads dtypes and ranks, which they never change, and optimizing
    # took most of the session's start on a ViT (0.2 s of its 0.3 s). A probe may fail where the model
    # needs other shapes: the warning says so, and ONNX Runtime's own error log line would only repeat it.
    options = _options.OrtOptions(graph_optimization_level="disable", log_severity=4)
    progress("learning the types of %d tensor(s) shape inference left unknown (%s): running %s in ONNX Runtime",
             len(names), _names(names, 3), model.source)
    run = tapped_session(model, names, options, f"probe run of {model.source}", time_limit=PROBE_SECONDS)
    given = [dict(entry) for entry in key] or [{} for _ in PROBE_DIMS]
    runs, symbols = [], []
    for k, shapes in enumerate(given):
        feeds, named = _feeds(model, shapes, PROBE_DIMS[k % len(PROBE_DIMS)], np.random.default_rng(k))
        runs.append(run(feeds, names))
        by_size: dict[int, set[str]] = {}
        for sym, value in named.items():
            by_size.setdefault(value, set()).add(sym)
        # a size that two names share is neither name's
        symbols.append({v: next(iter(syms)) for v, syms in by_size.items() if len(syms) == 1})
    return runs, symbols


def _feeds(model: Model, shapes: Mapping[str, Sequence[int]], size: int, rng: np.random.Generator
           ) -> tuple[dict[str, Any], dict[str, int]]:
    """Random feeds of every model input at ``shapes`` (input -> shape), dims not given by them
    ``size``; and the size each named dim took. _Unprobeable where an input cannot be fed."""
    feeds, named = {}, {}
    ranges = _random_data.index_ranges(model.proto.graph)  # (token ids within their tables)
    # dims the given shapes fix by name: an input given none takes them where it shares the name
    # (a mask beside the token ids it was not given a shape with)
    given_dims = {d.dim_param: int(shapes[vi.name][axis]) for vi in model.proto.graph.input
                  if vi.name in shapes and vi.type.HasField("tensor_type")
                  and len(vi.type.tensor_type.shape.dim) == len(shapes[vi.name])
                  for axis, d in enumerate(vi.type.tensor_type.shape.dim) if d.WhichOneof("value") == "dim_param"}
    for vi in model.proto.graph.input:
        tp = vi.type
        if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.elem_type \
                or not tp.tensor_type.HasField("shape"):
            raise _Unprobeable(f"input '{vi.name}' is not a tensor of known dtype and rank")
        dims = tp.tensor_type.shape.dim
        want = shapes.get(vi.name)
        if want is not None and len(want) != len(dims):
            raise _Unprobeable(f"input '{vi.name}' has rank {len(dims)}, its profile shape {list(want)} "
                               f"rank {len(want)}")
        shape = []
        for axis, d in enumerate(dims):
            if want is not None:
                shape.append(int(want[axis]))
            elif d.WhichOneof("value") == "dim_value":
                shape.append(int(d.dim_value))
            else:
                shape.append(given_dims.get(d.dim_param, size) if d.WhichOneof("value") == "dim_param" else size)
            if d.WhichOneof("value") == "dim_param":
                named[d.dim_param] = shape[-1]
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tp.tensor_type.elem_type))
        feeds[vi.name] = _random_data.random_array(dtype, tuple(shape), rng, f"probe input '{vi.name}'",
                                                   ranges.get(vi.name))
    return feeds, named


def run_failure(model: Model, shapes: Mapping[str, Sequence[int]]) -> str | None:
    """ONNX Runtime's error (its first line) where the whole ``model`` fails to run once at
    ``shapes`` (input -> shape; every input's dims given, by its shape or by a named dim another
    input's shape gives) on seeded random inputs; None where it runs, or where it cannot be told
    (an input not fed at those shapes, a model ONNX Runtime does not load)."""
    try:
        feeds, _ = _feeds(model, shapes, 0, np.random.default_rng(0))
    except (TrtBackendError, _Unprobeable):
        return None
    if any(0 in np.shape(v) for name, v in feeds.items() if name not in shapes):
        return None  # A dim nothing gave: the run would say nothing about the shapes given.
    options = _options.OrtOptions(graph_optimization_level="disable", log_severity=4)
    try:
        run = tapped_session(model, [], options, f"run of {model.source} at the shapes given")
    except TrtBackendError:
        return None
    outputs = [o.name for o in model.proto.graph.output]
    try:
        run(feeds, outputs)
    except TrtBackendError as e:
        return str(e)
    return None


def _type_of(name: str, values: Sequence[Any], symbols: Sequence[dict[int, str]]) -> onnx.TypeProto | None:
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    if len(arrays) != len(values) or len({a.dtype for a in arrays}) != 1 or len({a.ndim for a in arrays}) != 1:
        return None
    try:
        elem = onnx.helper.np_dtype_to_tensor_dtype(arrays[0].dtype)
    except (KeyError, TypeError, ValueError):
        return None
    tp = onnx.helper.make_tensor_type_proto(elem, None)
    shape = tp.tensor_type.shape
    shape.SetInParent()  # a known rank, even 0
    for axis in range(arrays[0].ndim):
        sizes = [a.shape[axis] for a in arrays]
        dim = shape.dim.add()
        if len(set(sizes)) == 1:
            dim.dim_value = sizes[0]
        else:
            names = {s.get(size) for s, size in zip(symbols, sizes)}
            if len(names) == 1 and None not in names:
                dim.dim_param = names.pop()  # type: ignore[assignment]
    return tp
