"""Polygraphy glue for accuracy comparisons: a ``BaseRunner`` over our stitched Session, seeded
random feeds at the shapes the Session's profiles give (drawn by
:mod:`trt_backend.ort.random_data`, as every other command draws them), NaN/inf handled before
Polygraphy's simple compare function, and its results read back as :class:`TensorError`.

Polygraphy is imported inside functions only (``import trt_backend.accuracy.polygraphy_glue`` needs
neither Polygraphy nor ONNX Runtime). Tested with Polygraphy 0.53.6; the code keeps to API that
0.49 already had, with a small conditional where 0.53 renamed it (``SimpleCompareFunc`` replaces
the deprecated ``CompareFunc.simple``)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trt_backend.accuracy.numeric import prepare_pair, tidy
from trt_backend.accuracy.numeric import tensor_error as numeric_tensor_error
from trt_backend.accuracy.options import CompareOptions
from trt_backend.accuracy.report import TensorError
from trt_backend.errors import ComparisonError, FeedError, ReferenceRunError
from trt_backend.ort.sessions import first_line, ort_errors
from trt_backend.ort.random_data import random_feed
from trt_backend.ort.values import to_numpy
from trt_backend.profiles import Profile
from trt_backend.profiles.node_arg import NodeArg, shape_text
from trt_backend.session.feeds import value_ranges
from trt_backend.session.session import Session

log = logging.getLogger(__name__)

POLYGRAPHY_TESTED = (">=0.49", "<0.54")  # 0.53.6 measured; setup.py pins the same range
OURS, REFERENCE = "trt-backend", "onnxruntime-reference"
_REQUIRED = {"elemwise": "max", "max": "max", "mean": "mean", "median": "median", "quantile": "quantile"}
_INF = float("inf")


@contextlib.contextmanager
def polygraphy_logging() -> Iterator[None]:
    """Polygraphy's logger follows ours (-v: its info, -vv: its verbose; silent otherwise, since
    our report says it all) and its exceptions become :class:`ComparisonError`. Numpy's
    warnings about 0/0 and empty means inside its statistics are muted: the report states
    non-finite values itself."""
    from polygraphy.exception import PolygraphyException
    from polygraphy.logger import G_LOGGER

    if log.isEnabledFor(logging.DEBUG):
        severity = G_LOGGER.VERBOSE
    elif log.isEnabledFor(logging.INFO):
        severity = G_LOGGER.INFO
    else:
        severity = G_LOGGER.CRITICAL + 1
    with G_LOGGER.verbosity(severity), warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            yield
        except PolygraphyException as e:
            raise ComparisonError(f"Polygraphy: {first_line(e)}") from None


@functools.lru_cache(maxsize=1)
def _runner_classes() -> tuple[type, type]:
    from polygraphy.backend.base import BaseRunner
    from polygraphy.backend.onnxrt import OnnxrtRunner
    from polygraphy.common import TensorMetadata
    from polygraphy.datatype import DataType

    class SessionRunner(BaseRunner):  # type: ignore[misc]
        """Runs a :class:`trt_backend.Session` (TensorRT segments, emulated or not, and ONNX
        Runtime segments stitched) under Polygraphy's Comparator."""

        def __init__(self, session: Any, output_names: Sequence[str], name: str = OURS,
                     ranks: Mapping[str, int] | None = None) -> None:
            super().__init__(name=name, prefix="trt-backend-runner")
            self._session = session
            self._output_names = list(output_names)
            self._ranks = dict(ranks or {})  # inputs of unknown rank -> the rank of the feeds given
            self.side_outputs: list[dict[str, Any]] = []  # per inference: outputs that are not tensors

        def activate_impl(self) -> None:
            self.session = self._session

        def get_input_metadata_impl(self) -> Any:
            meta = TensorMetadata()
            for arg in self.session.get_inputs():
                shape = ([None] * self._ranks.get(arg.name, 0) if arg.rank is None
                         else [d if isinstance(d, int) else None for d in arg.shape])
                # (a string tensor's numpy dtype is object, which Polygraphy cannot place: its own name)
                dtype = DataType.STRING if arg.type == "tensor(string)" else arg.dtype
                meta.add(arg.name, dtype=dtype, shape=shape)
            return meta

        def infer_impl(self, feed_dict: Mapping[str, Any]) -> OrderedDict[str, Any]:
            start = time.perf_counter()
            values = self.session.run(self._output_names, dict(feed_dict))
            self.inference_time = time.perf_counter() - start
            out = OrderedDict(zip(self._output_names, (host(v) for v in values)))
            return _tensors_only(out, self.side_outputs)

        def deactivate_impl(self) -> None:
            del self.session

    return SessionRunner, OnnxrtRunner


def session_runner(session: Session, output_names: Sequence[str], ranks: Mapping[str, int] | None = None) -> Any:
    """A Polygraphy runner over ``session`` producing ``output_names``; ``ranks``: the rank of
    the feeds of inputs whose rank the model leaves unknown (Polygraphy needs one)."""
    return _runner_classes()[0](session, output_names, ranks=ranks)


def unknown_rank_feeds(session: Session, feeds: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Inputs of unknown rank -> the rank of the first feed given for them."""
    unknown = {a.name for a in session.get_inputs() if a.kind == "tensor" and a.rank is None}
    ranks: dict[str, int] = {}
    for feed in feeds:
        for name in unknown & set(feed):
            ranks.setdefault(name, int(np.ndim(feed[name])))
    return ranks


@dataclass(frozen=True)
class _InputArg:
    """An ONNX Runtime input as Polygraphy reads it, with a rank where ONNX Runtime says []."""

    name: str
    type: str
    shape: list[Any]


class _ReferenceSession:
    """An ONNX Runtime session whose run failures name the reference. Polygraphy sees its tensor
    outputs only; sequences and maps (ZipMap's probabilities) are kept aside, per run, in
    ``side_outputs`` and compared by :func:`side_errors`."""

    def __init__(self, session: Any, ranks: Mapping[str, int] | None = None) -> None:
        self._session = session
        self.side_outputs: list[dict[str, Any]] = []
        self._tensors = [o for o in session.get_outputs() if str(o.type).startswith("tensor(")
                         and o.type != "tensor(string)"]
        self._ranks = dict(ranks or {})  # see session_runner

    def get_inputs(self) -> Any:
        return [_InputArg(i.name, i.type, [None] * self._ranks[i.name]) if i.name in self._ranks else i
                for i in self._session.get_inputs()]

    def get_outputs(self) -> Any:
        return list(self._tensors)

    def run(self, output_names: Any, feeds: Mapping[str, Any]) -> Any:
        every = [o.name for o in self._session.get_outputs()]
        try:
            values = self._session.run(every, feeds)
        except ort_errors() as e:
            raise ReferenceRunError(f"the reference (ONNX Runtime, whole model) failed to run: "
                                    f"{first_line(e)}") from None
        out = _tensors_only(OrderedDict(zip(every, values)), self.side_outputs)
        wanted = output_names if output_names is not None else [o.name for o in self._tensors]
        return [out[n] for n in wanted]


class SavedReference:
    """Outputs saved by an earlier run (on a GPU machine, by another runtime), served as the
    reference one set per run, in order, with the ONNX Runtime session interface the comparison
    reads (``get_inputs``, ``get_outputs``, ``run``)."""

    def __init__(self, inputs: Sequence[NodeArg], outputs: Sequence[NodeArg],
                 runs: Sequence[Mapping[str, Any]]) -> None:
        self._inputs = [_InputArg(a.name, a.type, list(a.shape)) for a in inputs]
        self._outputs = [_InputArg(a.name, a.type, list(a.shape)) for a in outputs]
        self._runs = list(runs)
        self._next = 0
        saved = set().union(*map(set, self._runs))
        missing = sorted({o.name for o in outputs if o.type.startswith("tensor(")} - saved)
        if missing:
            raise FeedError(f"the saved outputs lack {', '.join(missing)}: save them with the same model")
        # outputs an .npz cannot hold (sequences, maps): not saved, so not compared
        self.unsaved = [o.name for o in outputs if not o.type.startswith("tensor(") and o.name not in saved]

    def get_inputs(self) -> Any:
        return list(self._inputs)

    def get_outputs(self) -> Any:
        return list(self._outputs)

    def run(self, output_names: Any, feeds: Mapping[str, Any]) -> Any:
        if self._next >= len(self._runs):
            raise ReferenceRunError("the saved outputs ran out: one set per input set")
        values = self._runs[self._next]
        self._next += 1
        names = output_names if output_names is not None else [o.name for o in self._outputs]
        return [values.get(n) for n in names]


def _tensors_only(values: OrderedDict[str, Any], side: list[dict[str, Any]]) -> OrderedDict[str, Any]:
    """The tensors of ``values`` Polygraphy compares; the rest (sequences, maps, empty optionals,
    and string tensors, whose numpy dtype, object, Polygraphy has no type for) appended to ``side``."""
    side.append({n: v for n, v in values.items() if not _polygraphy_tensor(v)})
    return OrderedDict((n, v) for n, v in values.items() if _polygraphy_tensor(v))


def _polygraphy_tensor(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype != object


def side_errors(name: str, ours: Any, ref: Any, options: CompareOptions) -> TensorError:
    """A sequence of tensors or of maps (or an empty optional) against the reference's: same
    length, same keys, and the numbers together within tolerance. A string tensor: equal or not,
    element by element, as labels are judged."""
    if isinstance(ours, np.ndarray) and isinstance(ref, np.ndarray):
        if ours.shape != ref.shape:
            return TensorError(_INF, _INF, _INF, _INF, _INF, _INF, False,
                               note=f"shape {ours.shape} vs reference {ref.shape}: not comparable")
        wrong = int(np.count_nonzero(ours != ref))
        return TensorError(*(0.0 if not wrong else _INF,) * 6, not wrong, differing=wrong)
    flat = side_numbers(ours, ref)
    if isinstance(flat, str):
        return TensorError(_INF, _INF, _INF, _INF, _INF, _INF, False, note=flat)
    if flat is None or not flat[1].size:
        return TensorError(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, True)
    atol, rtol = options.output_tolerances.get(name, (options.atol, options.rtol))
    return numeric_tensor_error(flat[0], flat[1], atol, rtol, options.error_stat, options.error_quantile)


def side_numbers(ours: Any, ref: Any) -> tuple[np.ndarray, np.ndarray] | str | None:
    """The numbers of a sequence of tensors or of maps (or of one map) and of the reference's, as
    two flat arrays in the same order (a map's by the reference's keys): what :func:`side_errors`
    and ``--precision auto`` compare, by the one rule. None for two empty optionals; where the two
    cannot be compared (lengths, keys or shapes differ, an empty optional on one side), why."""
    if isinstance(ours, dict) and isinstance(ref, dict):  # a map output: one map
        ours, ref = [ours], [ref]
    if ours is None or ref is None:
        return None if ours is None and ref is None else "an empty optional on one side"
    if not isinstance(ours, (list, tuple)) or not isinstance(ref, (list, tuple)) or len(ours) != len(ref):
        return f"{_describe(ours)} vs reference {_describe(ref)}: not comparable"
    pairs = []
    for a, b in zip(ours, ref):
        if isinstance(a, dict) and isinstance(b, dict):
            if a.keys() != b.keys():
                return "map keys differ from the reference's"
            pairs += [(np.asarray(a[k]), np.asarray(b[k])) for k in b]
        else:
            pairs.append((np.asarray(host(a)), np.asarray(host(b))))
    if any(x.shape != y.shape for x, y in pairs):
        return "element shapes differ from the reference's"
    if not pairs:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    return np.concatenate([x.reshape(-1) for x, _ in pairs]), np.concatenate([y.reshape(-1) for _, y in pairs])


def _describe(value: Any) -> str:
    return f"a sequence of {len(value)}" if isinstance(value, (list, tuple)) else type(value).__name__


def host(value: Any) -> Any:
    """A value as numpy: device arrays (GPU path) copied to the host, OrtValues read."""
    return value.to_host() if hasattr(value, "to_host") else to_numpy(value)


# ------------------------------------------------------------------ inputs

def profile_points(profiles: Sequence[Profile], shapes: Mapping[str, Sequence[int]] | None,
                   all_profile_shapes: bool) -> list[tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]]:
    """The (shapes, shape-tensor values) to generate data at: ``shapes`` when given, else each
    profile's opt point (min, opt and max with ``all_profile_shapes``), duplicates dropped."""
    if shapes is not None and not all_profile_shapes:
        return [({n: tuple(s) for n, s in shapes.items()}, {})]
    points: list[tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]] = []
    which = (0, 1, 2) if all_profile_shapes else (1,)
    for prof in profiles:
        for k in which:
            dims = {n: (tp.min, tp.opt, tp.max)[k] for n, tp in prof.items()}
            values = {n: tp.values[k] for n, tp in prof.items() if tp.values is not None}
            if (dims, values) not in points:
                points.append((dims, values))
    if not points and shapes is not None:
        points.append(({n: tuple(s) for n, s in shapes.items()}, {}))
    return points or [({}, {})]


def generate_feeds(inputs: Sequence[NodeArg], points: Sequence[tuple[Mapping[str, Sequence[int]], Mapping[str, Any]]],
                   seed: int, iterations: int, val_range: Any = None, int_range: Any = None) -> list[dict[str, Any]]:
    """``iterations`` feeds per point from :func:`trt_backend.ort.random_data.random_feed` (its
    module doc gives the default ranges; ``val_range``/``int_range``: one (lo, hi) or one per
    input name for float/integer inputs), feed ``j`` of the series seeded with ``seed + j``;
    shape-tensor inputs get their profile values."""
    ranges = value_ranges(inputs, val_range, int_range)
    feeds: list[dict[str, Any]] = []
    for k, (dims, values) in enumerate(points):
        tensors = []
        for arg in inputs:
            if arg.kind != "tensor" or arg.dtype is None:
                raise FeedError(f"input '{arg.name}' is {arg.type}; random data is only made for tensors, "
                                "pass feeds explicitly (compare(..., feeds=[...]))")
            shape = dims.get(arg.name)
            if shape is None and arg.rank is not None and not arg.is_dynamic:
                shape = tuple(int(d) for d in arg.shape)  # type: ignore[arg-type]
            if shape is None:
                raise FeedError(f"input '{arg.name}' has dynamic shape {shape_text(arg.shape)} and no profile gives "
                                f"its shape; pass --shapes {arg.name}:... (or a profile)")
            tensors.append((arg.name, arg.dtype, tuple(shape)))
        for i in range(iterations):
            feed: dict[str, Any] = random_feed(tensors, seed + k * iterations + i, ranges)
            for name, value in values.items():
                if name in feed:
                    feed[name] = np.asarray(value, dtype=feed[name].dtype).reshape(feed[name].shape)
            feeds.append(feed)
    return feeds


# ------------------------------------------------------------------ comparing

def compare_func(options: CompareOptions) -> Any:
    """Polygraphy's simple compare function with our global and per-output tolerances."""
    from polygraphy import comparator

    atol = {"": options.atol, **{n: t[0] for n, t in options.output_tolerances.items()}}
    rtol = {"": options.rtol, **{n: t[1] for n, t in options.output_tolerances.items()}}
    kwargs = dict(atol=atol, rtol=rtol, check_error_stat=options.error_stat, error_quantile=options.error_quantile,
                  infinities_compare_equal=True)
    if hasattr(comparator, "SimpleCompareFunc"):  # 0.53+; CompareFunc.simple is deprecated there
        return comparator.SimpleCompareFunc(**kwargs)
    return comparator.CompareFunc.simple(**kwargs)


def polygraphy_tensor_error(result: Any, options: CompareOptions, matched: int, mismatched: int,
                 shapes: tuple[Any, Any] = (None, None)) -> TensorError:
    """A Polygraphy ``OutputCompareResult`` (or the bare False it returns when shapes cannot be
    aligned) as a :class:`TensorError`."""
    if shapes[0] is not None and shapes[0] == shapes[1] and 0 in shapes[0]:  # both empty: equal
        return TensorError(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, mismatched == 0, matched, mismatched)
    if not hasattr(result, "max_absdiff"):
        note = f"shape {shapes[0]} vs reference {shapes[1]}: not comparable"
        return TensorError(_INF, _INF, _INF, _INF, _INF, _INF, False, matched, mismatched, note)
    stat = _REQUIRED[options.error_stat]

    def value(name: str) -> float:
        v = getattr(result, name, None)
        return _INF if v is None else float(v)

    return tidy(TensorError(value("max_absdiff"), value("max_reldiff"), value("mean_absdiff"),
                            value("median_absdiff"), value(f"{stat}_absdiff"), value(f"{stat}_reldiff"),
                            bool(result) and mismatched == 0, matched, mismatched))


def compare_tensors(ours: Mapping[str, Any], ref: Mapping[str, Any], func: Any,
                    options: CompareOptions) -> dict[str, TensorError]:
    """Each tensor of ``ours`` that ``ref`` has, compared by ``func`` after NaN/inf masking;
    non-tensor values (sequences, empty optionals) are left out."""
    from polygraphy.comparator import IterationResult

    a: dict[str, Any] = OrderedDict()
    b: dict[str, Any] = OrderedDict()
    counts: dict[str, tuple[int, int]] = {}
    shapes: dict[str, tuple[Any, Any]] = {}
    for name, value in ours.items():
        x, y = host(value), host(ref.get(name))
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
            continue
        a[name], b[name], m, mm = prepare_pair(x, y)
        counts[name], shapes[name] = (m, mm), (x.shape, y.shape)
    if not a:
        return {}
    with polygraphy_logging():
        matches = func(IterationResult(a, runner_name=OURS), IterationResult(b, runner_name=REFERENCE))
    return {n: polygraphy_tensor_error(matches.get(n, False), options, *counts[n], shapes[n]) for n in a}


@dataclass
class ComparisonRun:
    """One comparison's results: each iteration's errors per output, each runner's mean time in
    ms, what the reference held per output (:class:`Seen`), both sides' values per iteration (for
    task checks and saved runs) and the options the errors were judged by (per-output atol from
    ``atol_of_range`` filled in)."""

    errors: list[dict[str, TensorError]]
    timing: dict[str, float]
    seen: dict[str, Seen]
    ours: list[dict[str, Any]]
    reference: list[dict[str, Any]]
    options: CompareOptions


def _run(comparator: Any, runners: Sequence[Any], feeds: Sequence[Mapping[str, Any]]) -> Any:
    """``Comparator.run`` of ``runners`` on ``feeds``; where a feed holds strings, which
    Polygraphy's data loader cannot hold (it has no type for numpy's object arrays), each runner
    is fed them as they are, in the same order, into the same results."""
    if not any(getattr(getattr(v, "dtype", None), "kind", None) in ("O", "S", "U")  # (device arrays: never strings)
               for feed in feeds for v in feed.values()):
        return comparator.run(runners, data_loader=[dict(f) for f in feeds])
    from polygraphy.comparator import IterationResult, RunResults

    results = RunResults()
    for runner in runners:
        with runner as active:
            iterations = []
            for feed in feeds:
                outputs = active.infer(feed_dict=dict(feed), check_inputs=False)
                iterations.append(IterationResult(outputs=outputs, runtime=active.last_inference_time(),
                                                  runner_name=active.name))
            results.append((active.name, iterations))
    return results


def run_comparison(session: Session, ort_session: Any, feeds: Sequence[Mapping[str, Any]], output_names: Sequence[str],
                   options: CompareOptions) -> ComparisonRun:
    """Polygraphy's ``Comparator.run`` (our Session, then the reference) on ``feeds`` and
    ``Comparator.compare_accuracy`` with the simple compare function (tolerances scaled to each
    output's range on the reference first, where ``options.atol_of_range`` asks for it)."""
    from polygraphy.comparator import Comparator

    ranks = unknown_rank_feeds(session, feeds)
    reference = _ReferenceSession(ort_session, ranks)
    ours_runner = session_runner(session, output_names, ranks)
    runners = [ours_runner, _runner_classes()[1](reference, name=REFERENCE)]
    with polygraphy_logging():
        results = _run(Comparator, runners, feeds)
        ours, ref = results[0][1], results[1][1]
        ours_side, ref_side = ours_runner.side_outputs, reference.side_outputs
        ours_values = [{**{n: host(v) for n, v in it.items()}, **side} for it, side in zip(ours, ours_side)]
        ref_values = [{**{n: host(v) for n, v in it.items()}, **side} for it, side in zip(ref, ref_side)]
        seen = {n: Seen() for n in output_names}
        for values in ref_values:
            for name in output_names:
                if name in values:
                    seen[name].add(values[name])
        options = judged_tolerances(options, seen)
        counts: list[dict[str, tuple[int, int]]] = []
        shapes: list[dict[str, tuple[Any, Any]]] = []
        for it0, it1 in zip(ours, ref):
            counts.append({})
            shapes.append({})
            for name in list(it0.keys()):
                if name in it1:
                    x, y = it0[name], it1[name]
                    shapes[-1][name] = (getattr(x, "shape", None), getattr(y, "shape", None))
                    it0[name], it1[name], *pair = prepare_pair(x, y)
                    counts[-1][name] = (pair[0], pair[1])
        accuracy = Comparator.compare_accuracy(results, compare_func=compare_func(options))
    per_iteration = accuracy[0][(OURS, REFERENCE)]
    errors = [{n: side_errors(n, ours_side[i][n], ref_side[i].get(n), options) if n in ours_side[i] else
               polygraphy_tensor_error(match.get(n, False), options, *counts[i].get(n, (0, 0)),
                                       shapes[i].get(n, (None, None)))
               for n in output_names} for i, match in enumerate(per_iteration)]
    for i, it in enumerate(errors):  # integers and booleans: the count of differing elements beside the verdict
        for n in output_names:
            x, y = ours_values[i].get(n), ref_values[i].get(n)
            if seen[n].by_equality and n not in ours_side[i] and isinstance(x, np.ndarray) \
                    and isinstance(y, np.ndarray):
                it[n] = numeric_tensor_error(x, y, 0.0, 0.0, options.error_stat, options.error_quantile)
    timing = {name: 1000.0 * float(np.mean([r.runtime or 0.0 for r in iters])) for name, iters in results}
    return ComparisonRun(errors, timing, seen, ours_values, ref_values, options)


def judged_tolerances(options: CompareOptions, seen: Mapping[str, Seen]) -> CompareOptions:
    """``options`` with each output's tolerance as it is judged: zero for an output the reference
    gave integers or booleans (judged by equality, :func:`~trt_backend.accuracy.numeric.compared_for_equality`,
    whatever tolerance was asked for), and, where ``atol_of_range`` asks for it, atol raised to
    that times the largest magnitude the reference produced (an output given its own tolerance
    keeps it)."""
    tolerances = dict(options.output_tolerances)
    for name, s in seen.items():
        if s.by_equality:
            tolerances[name] = (0.0, 0.0)
        elif options.atol_of_range and name not in tolerances and s.compared and s.low <= s.high:
            scale = max(abs(s.low), abs(s.high))
            tolerances[name] = (max(options.atol, options.atol_of_range * scale), options.rtol)
    if tolerances == dict(options.output_tolerances):
        return options
    return dataclasses.replace(options, tolerances=tolerances)


@dataclass
class Seen:
    """What the reference produced for one output over a comparison: elements compared (tensors:
    their size; sequences and maps: their entries), the range of its finite numeric values, and in
    how many iterations it was empty. An output empty in every iteration was not compared at all."""

    elements: int = 0
    finite: int = 0  # elements that are not NaN or inf (every non-float one)
    iterations: int = 0
    empty: int = 0
    low: float = math.inf
    high: float = -math.inf
    kinds: set[str] = field(default_factory=set)  # numpy dtype kinds of the reference's arrays

    @property
    def by_equality(self) -> bool:
        """The reference gave only integers or booleans: judged by equality, not tolerance."""
        return bool(self.kinds) and self.kinds <= set("biu")

    def add(self, value: Any) -> None:
        self.iterations += 1
        arrays = [host(v) for v in value] if isinstance(value, (list, tuple)) else \
            list(value.values()) if isinstance(value, dict) else [host(value)]
        size = 0
        for arr in arrays:
            if isinstance(arr, dict):  # a map's entries: its values, counted once below
                arr = np.asarray(list(arr.values()))
            if not isinstance(arr, np.ndarray):
                size += 0 if arr is None else 1
                self.finite += 0 if arr is None else 1
                continue
            size += int(arr.size)
            self.kinds.add(arr.dtype.kind)
            self.finite += int(np.isfinite(arr).sum()) if arr.dtype.kind in "fc" else int(arr.size)
            if arr.size and arr.dtype.kind in "fiub":
                finite = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
                if finite.size:
                    self.low = min(self.low, float(finite.min()))
                    self.high = max(self.high, float(finite.max()))
        self.elements += size
        self.empty += size == 0

    @property
    def compared(self) -> bool:
        """Something was compared: an element, and one that is not NaN/inf in the reference (NaN
        against NaN in every element compares nothing)."""
        return self.elements > 0 and self.finite > 0

    def describe(self) -> str:
        if not self.elements:
            return f"empty in all {self.iterations} comparison(s)"
        if not self.finite:
            return f"all {self.elements} element(s) NaN/inf in the reference: nothing finite to compare"
        span = f", values {self.low:.4g}..{self.high:.4g}" if self.low <= self.high else ""
        empty = f", empty in {self.empty} of {self.iterations}" if self.empty else ""
        return f"{self.elements} element(s){span}{empty}"
