"""The one generator of seeded random inputs: run, bench, compare, ``--calibration-data random``
and profile derivation all draw their data here, so the same seed feeds a model the same data
whichever command runs it.

What is drawn, per dtype (``value_range`` overrides the default range):

- floating point: uniform in ``[lo, hi)``, default ``FLOAT_RANGE`` ``[0, 1)``; complex numbers
  draw their real and imaginary parts so;
- integers: uniform over ``lo..hi`` with both ends included, default ``INT_RANGE`` ``0..2``
  (small enough to be a valid index or axis in most graphs); an input the graph gathers rows
  with takes at most the last row of its smallest table, and a one-element input the graph
  compares with a constant takes that constant (:func:`index_ranges`: BERT's token types, 2
  rows, take 0..1; silero-vad's sample rate 16000);
- booleans: False and True with equal odds;
- strings: one of ``STRINGS`` ("a", "b", "c") with equal odds;
- an input (or a column of one) that an ``ai.onnx.ml`` OneHotEncoder with ``zeros=0`` encodes,
  which fails on a category it does not know (scikit-learn's ``handle_unknown="error"``), takes
  only the encoder's categories, with equal odds (:class:`Categories`, found by
  :func:`index_ranges`).

A feed is drawn from a fresh generator seeded with ``seed``, tensor after tensor in the order
given; the ``k``-th feed of a series (compare's iterations, calibration batches, derivation runs)
is drawn with ``seed + k``."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trt_backend.errors import OptionsError
from trt_backend.ort.values import check_allocation

FLOAT_RANGE: tuple[float, float] = (0.0, 1.0)
# Arrays of a draw's size alive at once while it is made (numpy's draw in float32 or int64, the
# scaling's temporaries, the cast to the input's dtype): measured peak RSS grew ~5 bytes a byte.
_DRAW_COPIES = 4
INT_RANGE: tuple[int, int] = (0, 2)
STRINGS: tuple[str, ...] = ("a", "b", "c")


@dataclass(frozen=True)
class Categories:
    """The values an input's elements are drawn from where the graph fails on any other: the
    categories of the OneHotEncoders (``zeros=0``) that encode all of it (``values``; empty: the
    dtype's default draw) or one column of it, the index ``k`` along ``axis`` (``columns``: (k,
    values) pairs; scikit-learn's converter selects each column with a Gather or an
    ArrayFeatureExtractor before its encoder)."""

    values: tuple[Any, ...] = ()
    axis: int = -1
    columns: tuple[tuple[int, tuple[Any, ...]], ...] = ()


# A default draw's range for one input: (low, high), or the categories it takes.
ValueRange = tuple[Any, Any] | Categories


def random_array(dtype: np.dtype, shape: Sequence[int], rng: np.random.Generator,
                 what: str = "a random tensor", value_range: ValueRange | None = None) -> np.ndarray:
    """Random data of ``dtype`` and ``shape`` from ``rng``, drawn as the module doc says: an
    ndarray also for a scalar (shape ``()``: a 0-d array; numpy's draws give a bare numpy scalar
    there, which ONNX Runtime refuses). MemoryLimitError (naming ``what``) where the array would
    not fit in the memory limits."""
    return np.asarray(_draw(np.dtype(dtype), shape, rng, what, value_range))


def _draw(dtype: np.dtype, shape: Sequence[int], rng: np.random.Generator, what: str,
          value_range: ValueRange | None) -> Any:
    shape = tuple(int(d) for d in shape)
    check_allocation(shape, dtype, what, copies=_DRAW_COPIES)
    if isinstance(value_range, Categories):
        return _categories(dtype, shape, rng, what, value_range)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        lo, hi = _checked_range(value_range or INT_RANGE, what, int)
        info = np.iinfo(dtype)
        if lo < info.min or hi > info.max:
            raise OptionsError(f"{what}: value range {lo}..{hi} does not fit {dtype} ({info.min}..{info.max})")
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    if dtype.kind in "OSU":
        return np.array(rng.choice(list(STRINGS), size=shape), dtype=object).reshape(shape)
    lo, hi = _checked_range(value_range or FLOAT_RANGE, what, float)
    if dtype.kind == "c":
        return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dtype)
    return (lo + (hi - lo) * rng.random(shape, dtype=np.float32)).astype(dtype)


def _categories(dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator, what: str,
                cats: Categories) -> Any:
    """A draw of ``cats`` (see :class:`Categories`): the elements a listed column does not cover
    as the dtype draws by default, or from ``cats.values``."""
    def pick(values: tuple[Any, ...], size: tuple[int, ...]) -> Any:
        if dtype.kind in "OSU":
            return np.array(rng.choice(np.array([str(v) for v in values], dtype=object), size=size), dtype=object)
        return rng.choice(np.array(values), size=size).astype(dtype)

    usable = tuple(v for v in cats.values if _fits(v, dtype))
    out = np.array(pick(usable, shape) if usable else _draw(dtype, shape, rng, what, None))
    if not cats.columns or not shape:
        return out
    axis = cats.axis % len(shape) if -len(shape) <= cats.axis < len(shape) else None
    if axis is None:
        return out
    moved = np.moveaxis(out, axis, -1)  # (a view: writing it writes ``out``)
    for k, values in cats.columns:
        kept = tuple(v for v in values if _fits(v, dtype))
        if kept and -shape[axis] <= k < shape[axis]:
            moved[..., k] = pick(kept, moved.shape[:-1])
    return out


def _fits(value: Any, dtype: np.dtype) -> bool:
    """Whether a category ``value`` (an int or a str) can be held by ``dtype`` as it is."""
    if dtype.kind in "OSU":
        return isinstance(value, str)
    if isinstance(value, str):
        return False
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min <= int(value) <= info.max
    return dtype.kind in "fc"


def random_feed(tensors: Sequence[tuple[str, np.dtype, Sequence[int]]], seed: int,
                value_ranges: Mapping[str, ValueRange] | None = None,
                what: str = "input") -> dict[str, np.ndarray]:
    """One feed: ``(name, dtype, shape)`` per tensor, drawn in this order from a generator seeded
    with ``seed``; ``value_ranges`` gives the range of some tensors by name."""
    rng = np.random.default_rng(seed)
    ranges = value_ranges or {}
    return {name: random_array(dtype, shape, rng, f"{what} '{name}'", ranges.get(name))
            for name, dtype, shape in tensors}


# Ops that hand their first input's values on unchanged (moved, repeated, sliced, retyped): an
# index that reaches Gather through them is still an index into its table.
_SAME_VALUES = frozenset({"Cast", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand", "Transpose",
                          "Slice", "Tile", "Gather", "GatherElements", "GatherND"})


def index_ranges(graph: Any) -> dict[str, ValueRange]:
    """The default range of the graph inputs whose use the graph tells: a one-element integer
    input the graph compares (Equal) with a constant takes that value (silero-vad's sample
    rate, 16000: its other branch does not run at the same sizes); an integer input whose values
    reach the indices of a Gather from a table of known size (an embedding lookup), directly or
    through ops that move values without changing them, takes ``0..rows-1`` of its smallest such
    table, capped at ``INT_RANGE``'s high end; an input of any dtype some of whose values reach
    an ``ai.onnx.ml`` OneHotEncoder that fails on unknown categories takes those categories
    (:class:`Categories`). Inputs used otherwise keep the default; subgraphs are not followed."""
    integer = {vi.name for vi in graph.input if vi.type.HasField("tensor_type")
               and vi.type.tensor_type.elem_type in _INTEGER_TYPES}
    encoded = any(node.op_type == "OneHotEncoder" for node in graph.node)
    if not integer and not encoded:
        return {}
    import onnx
    from onnx import numpy_helper

    scalars = {vi.name for vi in graph.input if vi.name in integer and vi.type.tensor_type.HasField("shape")
               and all(d.WhichOneof("value") == "dim_value" and d.dim_value == 1
                       for d in vi.type.tensor_type.shape.dim)}
    sizes: dict[str, list[int]] = {t.name: list(t.dims) for t in graph.initializer}
    constants: dict[str, int] = {}  # one-element integer constants' values

    def keep(name: str, tensor: Any) -> None:
        if tensor.data_type in _INTEGER_TYPES and math.prod(tensor.dims) == 1 \
                and tensor.data_location != onnx.TensorProto.EXTERNAL:
            try:
                constants[name] = int(numpy_helper.to_array(tensor).reshape(-1)[0])
            except (ValueError, TypeError, IndexError):  # (a malformed tensor: loading it says so)
                pass

    for t in graph.initializer:
        keep(t.name, t)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value":
                    sizes[node.output[0]] = list(a.t.dims)
                    keep(node.output[0], a.t)
    for vi in list(graph.value_info) + list(graph.input):
        if vi.name not in sizes and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.WhichOneof("value") == "dim_value" for d in dims):
                sizes[vi.name] = [int(d.dim_value) for d in dims]
    consumers: dict[str, list[tuple[Any, int]]] = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name:
                consumers.setdefault(name, []).append((node, k))
    out: dict[str, tuple[int, int]] = {}
    for name in sorted(scalars):  # a setting the graph tests for one value (a sample rate): that value
        for node, k in consumers.get(name, ()):
            other = node.input[1 - k] if node.op_type == "Equal" and len(node.input) == 2 else None
            if other in constants:
                out[name] = (constants[other], constants[other])
                break
    for name in integer - set(out):
        rows: list[int] = []
        seen, todo = {name}, [name]
        while todo:  # (a walk of its own: graph depth costs no recursion)
            for node, k in consumers.get(todo.pop(), ()):
                if node.op_type == "Gather" and k == 1:
                    table = sizes.get(node.input[0])
                    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
                    if table and -len(table) <= axis < len(table) and table[axis] > 0:
                        rows.append(table[axis])
                elif node.op_type in _SAME_VALUES and k == 0:
                    for o in node.output:
                        if o and o not in seen:
                            seen.add(o)
                            todo.append(o)
        if rows:
            out[name] = (INT_RANGE[0], min(INT_RANGE[1], min(rows) - 1))
    found: dict[str, ValueRange] = dict(out)
    if encoded:
        found.update(_encoded_categories(graph, consumers, constants))
    return found


def _in_order(values: Any) -> tuple[Any, ...]:
    """Categories sorted (numbers by value, strings after them)."""
    return tuple(sorted(values, key=lambda v: (isinstance(v, str), v)))


# Ops through which an input's values reach a OneHotEncoder unchanged, its layout kept (the
# column a Gather or an ArrayFeatureExtractor then selects is the input's own column).
_SAME_LAYOUT = frozenset({"Cast", "Identity"})


def _encoded_categories(graph: Any, consumers: Mapping[str, list[tuple[Any, int]]], constants: Mapping[str, int]
                        ) -> dict[str, Categories]:
    """The inputs whose values (or one column's) reach a OneHotEncoder with ``zeros=0`` through
    ops that keep values, each with the categories it takes (see :class:`Categories`; two encoders
    of the same values: the categories both know)."""
    import onnx

    out: dict[str, Categories] = {}
    for vi in graph.input:
        whole: set[Any] | None = None
        columns: dict[tuple[int, int], set[Any]] = {}
        # (tensor, column selected as (axis, index) or None, layout still the input's)
        todo: list[tuple[str, tuple[int, int] | None, bool]] = [(vi.name, None, True)]
        seen = {(vi.name, None)}
        while todo:  # (a walk of its own: graph depth costs no recursion)
            name, column, layout = todo.pop()
            for node, k in consumers.get(name, ()):
                nxt: tuple[int, int] | None | str = "stop"
                if node.op_type == "OneHotEncoder" and node.domain == "ai.onnx.ml" and k == 0:
                    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                    if int(attrs.get("zeros", 1)) != 0:
                        continue
                    cats = set(attrs.get("cats_int64s") or ()) | {
                        v.decode() if isinstance(v, bytes) else v for v in attrs.get("cats_strings") or ()}
                    if column is None:
                        whole = cats if whole is None else whole & cats
                    else:
                        columns[column] = cats if column not in columns else columns[column] & cats
                    continue
                if k != 0:
                    continue
                if node.op_type in _SAME_VALUES and node.op_type not in ("Gather", "GatherElements", "GatherND"):
                    nxt = column
                elif column is None and layout and len(node.input) > 1 and node.input[1] in constants and (
                        node.op_type == "Gather" or (node.op_type == "ArrayFeatureExtractor"
                                                     and node.domain == "ai.onnx.ml")):
                    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0) \
                        if node.op_type == "Gather" else -1
                    nxt = (axis, constants[node.input[1]])
                if nxt == "stop":
                    continue
                for o in node.output[:1]:
                    if o and (o, nxt) not in seen:
                        seen.add((o, nxt))  # type: ignore[arg-type]
                        todo.append((o, nxt, layout and node.op_type in _SAME_LAYOUT))  # type: ignore[arg-type]
        if whole is None and not columns:
            continue
        axes = {axis for axis, _ in columns}
        if len(axes) > 1:
            columns = {}  # (columns along two axes: not drawn so)
        out[vi.name] = Categories(_in_order(whole or ()), next(iter(axes), -1) if columns else -1,
                                  tuple((k, _in_order(v)) for (_, k), v in sorted(columns.items()) if v))
    return {n: c for n, c in out.items() if c.values or c.columns}


# onnx.TensorProto's integer element types (INT8..UINT64): the inputs random ints are drawn for
_INTEGER_TYPES = frozenset({2, 3, 4, 5, 6, 7, 12, 13})


def _checked_range(pair: Any, what: str, kind: type) -> tuple[Any, Any]:
    try:
        lo, hi = pair
        lo, hi = kind(lo), kind(hi)
    except (TypeError, ValueError):
        raise OptionsError(f"{what}: a value range is (low, high), got {pair!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        raise OptionsError(f"{what}: a value range needs finite low <= high, got {pair!r}")
    return lo, hi
