"""Whether Triton may batch a build: with ``max_batch_size > 0`` Triton adds the batch as the
leading dim of every input and output of every composing model, so every tensor crossing a
segment boundary (model inputs and outputs included) must have the batch as its leading, dynamic
dim, and every engine's profiles must take batches 1..max_batch_size. The batch is the leading dim
the profiles give every model input as one range, whatever the exporter named it (or left
unnamed); a boundary tensor carries it when its derived profiles give it that range, else when
its dim has the inputs' batch name, else when running the model at a few batch sizes shows it
following the batch. The first tensor that breaks it is named."""
from __future__ import annotations

import logging

import onnx

from trt_backend.errors import ExportError, FeedError, SegmentLoadError, SegmentRunError
from trt_backend.export.observe import observed_shapes, rows_depend
from trt_backend.export.source import ExportSource
from trt_backend.profiles import TensorProfile
from trt_backend.profiles.profile import leading_ranges

log = logging.getLogger(__name__)

_DEFAULT = " (export without --max-batch-size: full shapes, no batching)"


def _leading(vi: onnx.ValueInfoProto) -> onnx.TensorShapeProto.Dimension | None:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape") or not tt.shape.dim:
        return None
    return tt.shape.dim[0]


def check_batching(source: ExportSource, max_batch: int) -> None:
    """ExportError naming the first tensor that Triton could not batch up to ``max_batch``."""
    what = f"--max-batch-size {max_batch}"
    model = source.plan.model
    if model is None:
        raise ExportError(f"{what}: the build's plan has no model")
    consumed = {n for seg in source.plan.segments for n in seg.inputs}
    batched: list[str] = []  # the model inputs Triton batches
    symbols: dict[str, str] = {}  # model input -> the name the model gives its leading dim (named ones)
    others: set[str] = set()  # names of the model inputs' other dims (a sequence length...): not the batch
    for vi in model.proto.graph.input:
        if vi.name not in consumed:
            continue
        dim = _leading(vi)
        if dim is None:
            raise ExportError(f"{what}: model input '{vi.name}' has no leading dim to batch{_DEFAULT}")
        if dim.HasField("dim_value"):
            raise ExportError(f"{what}: model input '{vi.name}': its leading dim is fixed at {dim.dim_value}, so it is "
                              f"not a batch dim{_DEFAULT}")
        batched.append(vi.name)
        if dim.dim_param:
            symbols[vi.name] = dim.dim_param
        others.update(d.dim_param for d in vi.type.tensor_type.shape.dim[1:] if d.dim_param)
    # the profiles tie the inputs' leading dims together whatever the exporter named them (or left unnamed)
    ranges = _batch_ranges(source, batched, what, max_batch)
    if len(set(symbols.values())) > 1 and not ranges:
        pairs = ", ".join(f"'{n}' {s}" for n, s in symbols.items())
        raise ExportError(f"{what}: the model inputs lead with different dims ({pairs}) and no profile gives them one "
                          f"batch range; Triton batches them all alike{_DEFAULT}")
    names = set(symbols.values())
    profiled: dict[str, list[TensorProfile]] = {}
    for profiles in source.segment_profiles.values():
        for p in profiles:
            for name, tp in p.items():
                profiled.setdefault(name, []).append(tp)
    undecided: dict[str, tuple[str, str]] = {}  # tensor -> (what, its leading dim's name)
    for seg in source.plan.segments:
        proto = source.segment_models[seg.id]
        values = {vi.name: vi for vi in list(proto.graph.input) + list(proto.graph.output)}
        for role, tensors in (("input", seg.inputs), ("output", seg.outputs)):
            for name in tensors:
                label = f"{what}: segment {seg.id} {role} '{name}'"
                shown = _check_tensor(values.get(name), label, names, others - names, profiled.get(name, []),
                                      ranges, batched_input=name in batched)
                if shown is not None and name not in undecided:
                    undecided[name] = (label, shown)
    if undecided:
        _check_by_running(source, undecided, batched, max_batch)
    if max_batch > 1:
        try:
            why = rows_depend(source, batched, "the row check of --max-batch-size")
        except (SegmentRunError, SegmentLoadError, FeedError) as e:  # (random data at made-up dims: as before)
            log.warning("%s: exported without checking that the model's rows are independent: a run to check failed "
                        "(%s); build with profiles of shapes it runs at to check it", what, e)
            why = None
        if why is not None:
            raise ExportError(f"{what}: {why}{_DEFAULT}")


def _check_by_running(source: ExportSource, undecided: dict[str, tuple[str, str]], batched: list[str],
                      max_batch: int) -> None:
    """Tensors whose leading dim neither the model's dim names nor a derived profile tie to the
    batch: run the whole model in ONNX Runtime at batch 1, 2 and ``max_batch`` (other dims at the
    first profile's opt) and require their leading dim to be the batch every time."""
    batches = sorted({1, max_batch, 2 if max_batch > 1 else 1})
    try:
        runs = observed_shapes(source, list(undecided), batches, batched, "the batch check of --max-batch-size")
    except (SegmentRunError, SegmentLoadError, FeedError) as e:
        label, shown = next(iter(undecided.values()))
        raise ExportError(f"{label}: its leading dim ({shown}) is not known to be the batch, and running the model "
                          f"to see failed: {e}{_DEFAULT}") from None
    for n, (label, shown) in undecided.items():
        seen = [shapes[n][0] if shapes[n] else -1 for shapes in runs]
        if seen != batches:
            got = ", ".join(f"{d} at batch {b}" for d, b in zip(seen, batches))
            raise ExportError(f"{label}: its leading dim ({shown}) does not follow the batch: ONNX Runtime gave {got}"
                              f"{_DEFAULT}")


def _batch_ranges(source: ExportSource, batched: list[str], what: str, max_batch: int) -> list[tuple[int, int]]:
    """Per input profile, the batch range (min, max) the model inputs' leading dims share there
    (inputs leading with different ranges: ExportError); each must take 1..max_batch."""
    ranges: list[tuple[int, int]] = []
    for k, seen in enumerate(leading_ranges(source.input_profiles, batched)):
        if not seen:
            continue
        if len(set(seen.values())) > 1:
            raise ExportError(f"{what}: profile {k} gives the inputs different batch ranges {seen}{_DEFAULT}")
        (name, (lo, hi)), = list(seen.items())[:1]
        if lo > 1 or hi < max_batch:
            raise ExportError(f"{what}: profile {k} of model input '{name}' takes batches {lo}..{hi}, but Triton sends "
                              f"any batch from 1 to {max_batch}; build with a profile covering 1..{max_batch} or lower "
                              "--max-batch-size")
        ranges.append((lo, hi))
    return ranges


def _check_tensor(vi: onnx.ValueInfoProto | None, what: str, symbols: set[str], others: set[str],
                  profiles: list[TensorProfile], ranges: list[tuple[int, int]], *, batched_input: bool = False
                  ) -> str | None:
    """ExportError if the tensor cannot carry the batch; None if it does; else (undecided: to be
    checked by running) how its leading dim is named. Its derived profiles decide where they
    exist (the batch range in every profile), whatever the exporter named the dim; then its name
    (one of the model inputs' batch dims, or one of their other dims)."""
    dim = _leading(vi) if vi is not None else None
    if dim is None:
        raise ExportError(f"{what} has no leading dim (a scalar, or rank unknown), so it cannot carry the "
                          f"batch{_DEFAULT}")
    if dim.HasField("dim_value"):
        raise ExportError(f"{what}: its leading dim is fixed at {dim.dim_value}, not the batch{_DEFAULT}")
    if batched_input:
        return None  # A model input Triton batches: checked above.
    for tp in profiles:
        if 0 in tp.data_dependent:
            raise ExportError(f"{what}: its leading dim depends on the data (derived profile min {tp.min} max "
                              f"{tp.max}), not the batch{_DEFAULT}")
    if profiles:
        spans = sorted({(tp.min[0], tp.max[0]) for tp in profiles if tp.min})
        if ranges and any(span not in ranges for span in spans):
            raise ExportError(f"{what}: its leading dim spans {spans} in the derived profiles while the batch spans "
                              f"{sorted(set(ranges))}, so it is not the batch{_DEFAULT}")
        if ranges:
            return None
    if dim.dim_param and dim.dim_param in symbols:
        return None
    if dim.dim_param in others:
        raise ExportError(f"{what}: its leading dim is '{dim.dim_param}', another dim of the model inputs than the "
                          f"batch{_DEFAULT}")
    return f"'{dim.dim_param}'" if dim.dim_param else "unnamed"
