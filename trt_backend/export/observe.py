"""What the exporter cannot read from the model's types, it observes: the whole (normalized)
model run in ONNX Runtime on seeded random inputs at the first profile's opt shapes (the batch
changed where asked), with the boundary tensors in question as extra outputs."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from trt_backend.errors import ExportError, FeedError, SegmentLoadError, SegmentRunError
from trt_backend.export.source import ExportSource
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import tapped_session
from trt_backend.profiles.node_arg import NodeArg, graph_inputs
from trt_backend.session.feeds import random_feeds, rows_interact


def observed_shapes(source: ExportSource, names: Sequence[str], batches: Sequence[int | None], batched: Sequence[str],
                    what: str) -> list[dict[str, tuple[int, ...]]]:
    """The shapes of ``names``, one dict per run: a run per entry of ``batches`` (None: the opt
    shapes as they are; else the leading dim of the inputs ``batched`` set to it). Raises the
    runtime's error (SegmentRunError, SegmentLoadError, FeedError) for the caller to word."""
    model = source.plan.model
    if model is None:
        raise ExportError(f"{what}: the build's plan has no model to run")
    args = graph_inputs(model.proto.graph)
    run = tapped_session(model, list(names), OrtOptions(), what)
    out = []
    for k, b in enumerate(batches):
        shapes = _at_batch(source, args, b, batched)
        values = run(random_feeds(args, shapes, seed=k), list(names))
        out.append({n: tuple(int(d) for d in np.shape(values[n])) for n in names})
    return out


def _at_batch(source: ExportSource, args: Sequence[NodeArg], batch: int | None,
              batched: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """The model inputs' shapes at the first profile's opt shapes (without one, the fixed dims and
    1 for the rest), the leading dim of the inputs ``batched`` set to ``batch`` (None: as it is)."""
    first = source.input_profiles[0] if source.input_profiles else {}
    shapes: dict[str, tuple[int, ...]] = {}
    for arg in args:
        base = list(first[arg.name].opt) if arg.name in first else \
            [d if isinstance(d, int) else 1 for d in (arg.shape or ())]
        if batch is not None and arg.name in batched and base:
            base[0] = batch
        shapes[arg.name] = tuple(base)
    return shapes


def rows_depend(source: ExportSource, batched: Sequence[str], what: str) -> str | None:
    """Why Triton's batching would change answers: the whole model run in ONNX Runtime on two rows
    of the ``batched`` inputs (other dims at the first profile's opt) against its first row alone
    (:func:`trt_backend.session.feeds.rows_interact`); None where the rows are independent. Raises
    the runtime's error for the caller to word."""
    model = source.plan.model
    if model is None:
        raise ExportError(f"{what}: the build's plan has no model to run")
    args = graph_inputs(model.proto.graph)
    shapes = _at_batch(source, args, 2, batched)
    run = tapped_session(model, [], OrtOptions(), what)
    outputs = [o.name for o in model.proto.graph.output]
    return rows_interact(lambda feeds, names: [run(feeds, names)[n] for n in names], args, shapes, batched, outputs,
                         seed=2)


def learn_ranks(source: ExportSource) -> tuple[list[str], list[str]]:
    """What one run of the model tells of shapes its types do not: boundary tensors whose type gives
    no rank (after ``ai.onnx.ml`` ops, Loop outputs...), and the model's outputs whose declared
    shape the run contradicts (another rank, or a fixed dim of another size, where only the
    declaration gives the shape: ddddocr's old recognizer declares ``[1, -1]`` for an output of
    shape ``(24, 1, 8210)``, which ONNX Runtime runs with a warning and Triton would refuse). Each
    is written into the segment models with the rank the run gave and every dim unknown (-1 in
    the configs). Returns (the tensors learned, the outputs contradicted as ``'name' declared [...]
    but computed (...)``); ExportError naming a tensor of unknown rank if the run fails (where
    only declarations were to be checked, they stand)."""
    unknown: set[str] = set()
    for seg in source.plan.segments:
        proto = source.segment_models[seg.id]
        for vi in list(proto.graph.input) + list(proto.graph.output):
            if vi.name in seg.inputs or vi.name in seg.outputs:
                if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
                    unknown.add(vi.name)
    model = source.plan.model
    declared = {vi.name: vi.type.tensor_type.shape.dim for vi in model.proto.graph.output
                if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.HasField("shape")} \
        if model is not None else {}
    names = sorted(unknown | set(declared))
    if not names:
        return [], []
    try:
        (shapes,) = observed_shapes(source, names, [None], [], "learning the rank of boundary tensors")
    except (SegmentRunError, SegmentLoadError, FeedError, ExportError) as e:
        if unknown:
            first = sorted(unknown)[0]
            raise ExportError(f"tensor '{first}' crosses a segment boundary with no known rank, and running the model "
                              f"to learn it failed: {e}") from None
        return [], []
    wrong = [n for n in sorted(declared) if len(declared[n]) != len(shapes[n]) or any(
        d.WhichOneof("value") == "dim_value" and d.dim_value > 0 and d.dim_value != v
        for d, v in zip(declared[n], shapes[n]))]
    ranks = {n: len(shapes[n]) for n in [*unknown, *wrong]}
    for seg in source.plan.segments:
        proto = source.segment_models[seg.id]
        if not any(vi.name in ranks for vi in list(proto.graph.input) + list(proto.graph.output)):
            continue
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        for vi in list(copy.graph.input) + list(copy.graph.output):
            if vi.name in ranks and vi.type.WhichOneof("value") == "tensor_type":
                vi.type.tensor_type.ClearField("shape")
                shape = vi.type.tensor_type.shape  # touching it marks the rank known
                shape.SetInParent()
                for _ in range(ranks[vi.name]):
                    shape.dim.add()
        source.segment_models[seg.id] = copy
    said = [f"'{n}' declared {[d.dim_value if d.WhichOneof('value') == 'dim_value' else -1 for d in declared[n]]} "
            f"but computed {shapes[n]}" for n in wrong]
    return sorted(unknown), said
