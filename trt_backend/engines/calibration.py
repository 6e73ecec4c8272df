"""Calibration data for int8: read, checked against the model's inputs and profiles, batched,
streamed, hashed.

The format: an ``.npz`` with one array per model input (by name), samples stacked along the first
(batch) dimension, fed in batches of the profile's opt batch; a model input without a batch dim
(a scalar such as a sample rate, or a state) takes one sample per entry of a leading axis (the
array has one more dim than the input: one entry per batch, or per sample, which makes the file's
batches one sample each); a 0-d array for a scalar input is its value for every batch of the file. A folder is
every ``.npz`` in it, in name order. Files may hold samples of different shapes (images of other
heights and widths, as detection and OCR data is): consecutive files of one shape are batched
together, and each shape within the profiles is calibrated as it is. Integer inputs take any
integer array whose values fit their type; bool inputs take bool arrays.

The data is streamed: one file is in memory at a time, so a folder may hold more samples than
memory does. ``random`` makes seeded random batches: a smoke test of the int8 path, not a
calibration (its scales mean nothing).

Every problem (a missing or unknown name, a wrong dtype or shape, a shape outside the profiles, an
empty file, NaN or inf, inputs with different sample counts) is one :class:`CalibrationDataError`
naming the file, the input, what the model expects and what the file holds."""
from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import os
import zipfile
from collections.abc import Iterator, Mapping, Sequence
import dataclasses
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
import onnx

from trt_backend._files import npz_problem
from trt_backend.errors import CalibrationDataError
from trt_backend.ort.random_data import ValueRange, index_ranges, random_feed
from trt_backend.ort.values import check_npz_sizes, npz_headers

log = logging.getLogger(__name__)

RANDOM = "random"
RANDOM_SAMPLES = 8

Shape = tuple[int, ...]
# Per profile: model input -> its (min, opt, max) shapes; a calibration batch must lie within one.
ShapeRanges = Sequence[Mapping[str, tuple[Shape, Shape, Shape]]]


@dataclass(frozen=True)
class InputSpec:
    """A model input as calibration data must fit it: name, numpy dtype, dims (None: dynamic)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...]
    int_range: ValueRange | None = None  # random draws' range (index_ranges: a table's rows, an encoder's categories)

    @classmethod
    def of(cls, value: onnx.ValueInfoProto) -> InputSpec:
        tt = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        return cls(value.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)), dims)


class Batches(Sequence[dict[str, np.ndarray]]):
    """Calibration batches (feeds of the whole model), read from their files on each pass: a
    sequence whose length is known (counted when the files were checked) and whose items are
    made again as they are iterated, never all held at once."""

    def __init__(self, make: Any, count: int) -> None:
        self._make = make
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self._make())

    @overload
    def __getitem__(self, k: int) -> dict[str, np.ndarray]: ...

    @overload
    def __getitem__(self, k: slice) -> list[dict[str, np.ndarray]]: ...

    def __getitem__(self, k: int | slice) -> dict[str, np.ndarray] | list[dict[str, np.ndarray]]:
        if isinstance(k, slice):
            return list(itertools.islice(iter(self), *k.indices(self._count)))
        if k < 0:
            k += self._count
        if not 0 <= k < self._count:
            raise IndexError(f"calibration batch {k} of {self._count}")
        return next(itertools.islice(iter(self), k, None))


@dataclass(frozen=True)
class CalibrationData:
    """Checked calibration batches (feeds of the whole model, streamed from the files: see
    :class:`Batches`), the number of samples, and the SHA-256 of their source."""

    source: str
    sha256: str
    batches: Sequence[dict[str, np.ndarray]] = field(repr=False)
    random: bool = False
    samples: int = 0
    shapes: int = 1  # distinct batch shapes (more than one: samples of different shapes, or a short batch)
    sample_shapes: int = 1  # distinct shapes of the samples themselves (each batch's without its leading dim)
    commonest: tuple[Any, ...] = ()  # the batch shape most batches have (batch_key), and how many have it
    commonest_count: int = 0

    def of_commonest_shape(self) -> CalibrationData:
        """These batches but those of another shape than the commonest (a last batch short of
        the batch size): what a calibrator that stacks every batch of a tensor takes."""
        if self.shapes <= 1:
            return self
        batches, keep = self.batches, self.commonest
        kept = Batches(lambda: (b for b in batches if batch_key(b) == keep), self.commonest_count)
        return dataclasses.replace(self, batches=kept, shapes=1, commonest_count=self.commonest_count)


def batch_key(batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """A calibration batch's shape: each input's, by name."""
    return tuple(sorted((n, tuple(np.shape(a))) for n, a in batch.items()))


def model_inputs(model: onnx.ModelProto) -> list[InputSpec]:
    inits = {t.name for t in model.graph.initializer}
    ranges = index_ranges(model.graph)
    return [dataclasses.replace(InputSpec.of(v), int_range=ranges.get(v.name))
            for v in model.graph.input if v.name not in inits]


def calibration_shapes(source: str) -> list[dict[str, tuple[int, ...]]]:
    """The shapes of the arrays in each .npz file of calibration data ``source`` (a file or a
    folder), from their headers: what a profile spans where none is given. Empty where the data
    cannot be read so (loading it names the problem)."""
    try:
        files = calibration_files(source)
        out = []
        for path in files:
            with np.load(path, allow_pickle=False) as data:
                out.append({name: shape for name, (shape, _) in npz_headers(data).items()})
        return out
    except (CalibrationDataError, OSError, ValueError, EOFError, zipfile.BadZipFile):
        return []


def calibration_files(source: str) -> list[str]:
    """The ``.npz`` files ``source`` names (a file, or every .npz of a folder)."""
    if os.path.isdir(source):
        files = sorted(os.path.join(source, f) for f in os.listdir(source) if f.endswith(".npz"))
        if not files:
            raise CalibrationDataError(f"calibration data {source}: the folder holds no .npz file")
        return files
    if not os.path.isfile(source):
        raise CalibrationDataError(f"calibration data {source}: no such file or folder (give FILE.npz, a folder of "
                                   f"them, or '{RANDOM}' for a smoke test)")
    return [source]


def data_sha256(source: str) -> str:
    """SHA-256 of the calibration data's bytes (``random``: of the word), for cache keys."""
    if source == RANDOM:
        return hashlib.sha256(b"random").hexdigest()
    files = calibration_files(source)
    return _sha256_files(tuple((f, os.path.getmtime(f), os.path.getsize(f)) for f in files))


@functools.lru_cache(maxsize=16)
def _sha256_files(stamped: tuple[tuple[str, float, int], ...]) -> str:
    digest = hashlib.sha256()
    for path, _, _ in stamped:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def load_calibration(source: str, inputs: Sequence[InputSpec], batch_sizes: Mapping[str, int] | None = None,
                     seed: int = 0, ranges: ShapeRanges = ()) -> CalibrationData:
    """Calibration batches for a model with ``inputs`` from ``source`` (see the module doc).
    ``batch_sizes``: the opt batch per input (default 1, or the input's static batch dim).
    ``ranges``: per profile, each input's (min, opt, max) shapes; a batch must lie within one
    profile (random batches take the first profile's opt shapes).
    Every file is read and checked here once (one at a time); the batches are read again as
    they are used."""
    sizes = dict(batch_sizes or {})
    if source == RANDOM:
        log.warning("calibration data 'random': a smoke test of the int8 path; its scales are not a calibration")
        made = _random_batches(inputs, sizes, seed, ranges[0] if ranges else {})
        return CalibrationData(RANDOM, data_sha256(RANDOM), made, random=True, samples=len(made))
    files = calibration_files(source)
    count, samples = 0, 0
    shapes: dict[tuple[Any, ...], int] = {}
    per_sample: set[tuple[Any, ...]] = set()
    for _path, batch in _stream(files, inputs, sizes, ranges):
        count += 1
        samples += _samples(batch, inputs)
        key = batch_key(batch)
        shapes[key] = shapes.get(key, 0) + 1
        per_sample.add(tuple((n, s[1:]) for n, s in key))
    if not count:
        raise CalibrationDataError(f"calibration data {source}: fewer samples than one batch")
    if len(shapes) > 1:
        log.info("calibration data %s: %d batch(es) in %d shapes", source, count, len(shapes))
    batches = Batches(lambda: (b for _, b in _stream(files, inputs, sizes, ranges)), count)
    commonest = max(shapes, key=lambda k: shapes[k])
    return CalibrationData(source, data_sha256(source), batches, samples=samples, shapes=len(shapes),
                           sample_shapes=len(per_sample), commonest=commonest, commonest_count=shapes[commonest])


def _samples(batch: Mapping[str, np.ndarray], inputs: Sequence[InputSpec]) -> int:
    batched = [batch[s.name] for s in inputs if s.dims and batch[s.name].ndim == len(s.dims)]
    return len(batched[0]) if batched else 1


def _stream(files: Sequence[str], inputs: Sequence[InputSpec], sizes: Mapping[str, int],
            ranges: ShapeRanges) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """(file, batch) for every batch of ``files``, one file in memory at a time. Samples of
    consecutive files with the same per-sample shapes fill batches together; a short batch is
    fed as it is where the batch dim is dynamic, and dropped where it is static."""
    pending: dict[str, np.ndarray] = {}
    pending_key: Any = None
    pending_path = ""
    for path in files:
        arrays = _read_npz(path, inputs)
        shared = {s.name for s in inputs if not s.dims and arrays[s.name].ndim == 0}  # One scalar for the file.
        steps = {s.name: (_batch(s, sizes) if arrays[s.name].ndim == len(s.dims) and s.dims else 0) for s in inputs}
        entries = {len(arrays[s.name]) for s in inputs if not steps[s.name] and s.name not in shared}
        stacked = {len(arrays[s.name]) for s in inputs if steps[s.name]}
        if len(entries) == 1 and entries == stacked and all(s.dims[0] is None for s in inputs if steps[s.name]):
            steps = {n: min(k, 1) for n, k in steps.items()}  # one entry per sample: a sample per batch
        counts = {n: (-(-len(a) // steps[n]) if steps[n] else len(a)) for n, a in arrays.items() if n not in shared}
        if not counts:
            counts = {"": 1}
        if len(set(counts.values())) > 1:
            raise CalibrationDataError(f"calibration data {path}: inputs make different numbers of batches "
                                       f"({', '.join(f'{n}: {c}' for n, c in counts.items())})")
        stackable = all(steps.values())
        key = tuple((n, a.shape[1:], a.dtype.str) for n, a in sorted(arrays.items())) if stackable else None
        if pending and (key is None or key != pending_key):
            yield from _flush(pending_path, pending, inputs, ranges)
            pending = {}
        if stackable:  # samples carried over from the previous file of this shape go first
            arrays = {n: np.concatenate([pending[n], a]) if pending else a for n, a in arrays.items()}
            full = min(len(arrays[s.name]) // steps[s.name] for s in inputs)
            for k in range(full):
                yield path, _checked(path, {s.name: arrays[s.name][k * steps[s.name]:(k + 1) * steps[s.name]]
                                            for s in inputs}, inputs, ranges)
            pending = {s.name: arrays[s.name][full * steps[s.name]:] for s in inputs}
            if not any(len(a) for a in pending.values()):
                pending = {}
            pending_key, pending_path = key, path
            continue
        for k in range(next(iter(counts.values()))):
            feed = {}
            for spec in inputs:
                step, array = steps[spec.name], arrays[spec.name]
                feed[spec.name] = (array if spec.name in shared else array[k * step:(k + 1) * step] if step
                                  else np.asarray(array[k]))
            short = any(len(feed[s.name]) < steps[s.name] for s in inputs if steps[s.name])
            if short:
                yield from _flush(path, feed, inputs, ranges)
            else:
                yield path, _checked(path, feed, inputs, ranges)
    if pending:
        yield from _flush(pending_path, pending, inputs, ranges)


def _flush(path: str, pending: dict[str, np.ndarray], inputs: Sequence[InputSpec],
           ranges: ShapeRanges) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """The short batch left over: fed where no input's batch dim is static and a profile takes it;
    else left out, as TensorRT's calibrators leave out what does not fill a batch."""
    if all(s.dims[0] is None for s in inputs if s.dims) and _fits(pending, ranges):
        yield path, _checked(path, pending, inputs, ranges)
    elif all(s.dims[0] is None for s in inputs if s.dims) and not _fits(pending, ranges, whole_batch=True):
        yield path, _checked(path, pending, inputs, ranges)  # outside the profiles in more than its batch: the error
    else:
        batched = [a for s in inputs if s.dims and (a := pending[s.name]).ndim == len(s.dims)]
        left = len(batched[0]) if batched else 1
        if (path, left) not in _said_short:  # (the data is read once per pass over it: said once)
            _said_short.add((path, left))
            log.warning("calibration data %s: %d sample(s) short of a whole batch left out (the batch is fixed "
                        "by the model or the profiles)", path, left)


_said_short: set[tuple[str, int]] = set()


def _fits(feed: Mapping[str, np.ndarray], ranges: ShapeRanges, whole_batch: bool = False) -> bool:
    """Whether one profile takes every input of ``feed`` (always, without profiles); with
    ``whole_batch``, whether it would with each input's batch dim at the profile's own."""
    def shape(n: str, hi: Shape) -> Shape:
        got = tuple(feed[n].shape)
        return (hi[0], *got[1:]) if whole_batch and got else got
    return not ranges or any(all(_within(shape(n, hi), lo, hi) for n, (lo, _, hi) in prof.items() if n in feed)
                             for prof in ranges)


def _checked(path: str, feed: dict[str, np.ndarray], inputs: Sequence[InputSpec],
             ranges: ShapeRanges) -> dict[str, np.ndarray]:
    """``feed`` when its shapes lie within one profile's (min, max) for every input it names;
    else the CalibrationDataError naming the first input outside (against the first profile)."""
    if not ranges:
        return feed
    for prof in ranges:
        if all(_within(feed[n].shape, lo, hi) for n, (lo, _, hi) in prof.items() if n in feed):
            return feed
    for n, (lo, _, hi) in ranges[0].items():
        if n in feed and not _within(feed[n].shape, lo, hi):
            allowed = " or ".join(f"{list(p[n][0])}..{list(p[n][2])}" for p in ranges if n in p)
            raise CalibrationDataError(f"calibration data {path}: input '{n}': a batch of shape {feed[n].shape} lies "
                                       f"outside the profiles, which take {allowed}; give samples within the "
                                       "profiles (or profiles that cover the data)")
    raise CalibrationDataError(f"calibration data {path}: a batch of shapes "
                               f"{ {n: a.shape for n, a in feed.items()} } lies within no one profile")


def _within(shape: Shape, lo: Shape, hi: Shape) -> bool:
    return len(shape) == len(lo) and all(a <= d <= b for d, a, b in zip(shape, lo, hi))


def _batch(spec: InputSpec, sizes: Mapping[str, int]) -> int:
    if spec.dims and spec.dims[0] is not None:
        return spec.dims[0]
    return sizes.get(spec.name, 1)


def _read_npz(path: str, inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    try:
        problem = npz_problem(path)
    except OSError as e:
        raise CalibrationDataError(f"calibration data {path}: cannot read it ({e.strerror or e})") from None
    if problem:  # (what --inputs says of the same file; numpy's own words spoke of loading pickled data)
        raise CalibrationDataError(f"calibration data {path}: {problem}")
    try:
        with np.load(path, allow_pickle=False) as data:
            check_npz_sizes(data, path)
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise CalibrationDataError(f"calibration data {path}: not a readable .npz ({e})") from None
    if not arrays:
        raise CalibrationDataError(f"calibration data {path}: the file holds no arrays (one per model input: "
                                   f"{', '.join(s.name for s in inputs)})")
    names = [s.name for s in inputs]
    unknown = [k for k in arrays if k not in names]
    if unknown:
        raise CalibrationDataError(f"calibration data {path}: array(s) {', '.join(map(repr, unknown))} name no model "
                                   f"input; the model's inputs are: {', '.join(names)}")
    for spec in inputs:
        if spec.name not in arrays:
            raise CalibrationDataError(f"calibration data {path}: no array for model input '{spec.name}' "
                                       f"({spec.dtype} {_dims(spec.dims)})")
        arrays[spec.name] = _check(path, spec, arrays[spec.name])
    return arrays


def _check(path: str, spec: InputSpec, array: np.ndarray) -> np.ndarray:
    """``array`` checked against ``spec`` (and of its dtype: integers converted where they fit)."""
    where = f"calibration data {path}: input '{spec.name}'"
    array = _of_dtype(where, spec, array)
    rank = len(spec.dims)
    if rank == 0 and array.ndim == 0:  # a scalar input's one value for every sample of the file
        return array
    if array.ndim == rank + 1:  # a leading sample axis over inputs that have no batch dim
        per_sample = array.shape[1:]
    elif array.ndim == rank and rank > 0:
        per_sample = array.shape[1:]
        spec_dims = spec.dims[1:]
        if spec.dims[0] is not None and array.shape[0] % spec.dims[0]:
            raise CalibrationDataError(f"{where} stacks {array.shape[0]} samples, not a multiple of its static batch "
                                       f"dim {spec.dims[0]}")
        _check_dims(where, per_sample, spec_dims, spec.dims)
        per_sample = ()
    else:
        raise CalibrationDataError(f"{where} has shape {array.shape}; the model takes {_dims(spec.dims)} (samples "
                                   "stacked on the batch dim, or on a new leading axis)")
    if per_sample:
        _check_dims(where, per_sample, spec.dims, spec.dims)
    if array.shape[0] == 0:
        raise CalibrationDataError(f"{where} holds no samples (shape {array.shape})")
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        bad = int(np.count_nonzero(~np.isfinite(array)))
        raise CalibrationDataError(f"{where} holds {bad} NaN/inf value(s); calibration needs finite data")
    return array


def _of_dtype(where: str, spec: InputSpec, array: np.ndarray) -> np.ndarray:
    if array.dtype == spec.dtype:
        return array
    if spec.dtype == np.dtype(object) and array.dtype.kind == "U":  # strings: stored as unicode, as --inputs reads them
        return array.astype(object)
    if spec.dtype.kind in "iu" and array.dtype.kind in "iub":
        info = np.iinfo(spec.dtype)
        if array.size == 0 or (int(array.min()) >= info.min and int(array.max()) <= info.max):
            return array.astype(spec.dtype)
        raise CalibrationDataError(f"{where} holds {array.dtype} values from {int(array.min())} to {int(array.max())}; "
                                   f"the model takes {spec.dtype} ({info.min}..{info.max})")
    raise CalibrationDataError(f"{where} is {array.dtype}, the model takes {spec.dtype}")


def _check_dims(where: str, got: tuple[int, ...], want: tuple[int | None, ...], full: tuple[int | None, ...]) -> None:
    if len(got) != len(want) or any(w is not None and g != w for g, w in zip(got, want)):
        raise CalibrationDataError(f"{where}: a sample has shape {tuple(got)}, the model takes {_dims(full)}")


def _dims(dims: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _random_batches(inputs: Sequence[InputSpec], sizes: Mapping[str, int], seed: int,
                    opt: Mapping[str, tuple[Shape, Shape, Shape]]) -> tuple[dict[str, np.ndarray], ...]:
    """Seeded random feeds at the ``opt`` shapes (else every dynamic dim but the batch 1), drawn
    by :func:`trt_backend.ort.random_data.random_feed`: batch ``k`` with ``seed + k``."""
    tensors = [(spec.name, spec.dtype, tuple(opt[spec.name][1]) if spec.name in opt else tuple(
                _batch(spec, sizes) if k == 0 else (d if d is not None else 1) for k, d in enumerate(spec.dims)))
               for spec in inputs]
    limits = {spec.name: spec.int_range for spec in inputs if spec.int_range is not None}
    return tuple(random_feed(tensors, seed + k, limits, what="calibration input") for k in range(RANDOM_SAMPLES))
