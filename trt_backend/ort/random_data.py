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
- strings: one of ``STRINGS`` ("a", "b", "c") with equal odds.

A feed is drawn from a fresh generator seeded with ``seed``, tensor after tensor in the order
given; the ``k``-th feed of a series (compare's iterations, calibration batches, derivation runs)
is drawn with ``seed + k``."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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


def random_array(dtype: np.dtype, shape: Sequence[int], rng: np.random.Generator,
                 what: str = "a random tensor", value_range: tuple[Any, Any] | None = None) -> np.ndarray:
    """Random data of ``dtype`` and ``shape`` from ``rng``, drawn as the module doc says: an
    ndarray also for a scalar (shape ``()``: a 0-d array; numpy's draws give a bare numpy scalar
    there, which ONNX Runtime refuses). MemoryLimitError (naming ``what``) where the array would
    not fit in the memory limits."""
    return np.asarray(_draw(np.dtype(dtype), shape, rng, what, value_range))


def _draw(dtype: np.dtype, shape: Sequence[int], rng: np.random.Generator, what: str,
          value_range: tuple[Any, Any] | None) -> Any:
    shape = tuple(int(d) for d in shape)
    check_allocation(shape, dtype, what, copies=_DRAW_COPIES)
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


def random_feed(tensors: Sequence[tuple[str, np.dtype, Sequence[int]]], seed: int,
                value_ranges: Mapping[str, tuple[Any, Any]] | None = None,
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


def index_ranges(graph: Any) -> dict[str, tuple[int, int]]:
    """The default range of the integer graph inputs whose use the graph tells: a one-element
    input the graph compares (Equal) with a constant takes that value (silero-vad's sample
    rate, 16000: its other branch does not run at the same sizes); one whose values reach the
    indices of a Gather from a table of known size (an embedding lookup), directly or through ops
    that move values without changing them, takes ``0..rows-1`` of its smallest such table,
    capped at ``INT_RANGE``'s high end. Inputs used otherwise keep the default; subgraphs are not
    followed."""
    integer = {vi.name for vi in graph.input if vi.type.HasField("tensor_type")
               and vi.type.tensor_type.elem_type in _INTEGER_TYPES}
    if not integer:
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
    return out


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
