"""Calibration data for int8: read, checked against the model's inputs, batched, hashed.

The format: an ``.npz`` with one array per model input (by name), samples stacked along the first
(batch) dimension, fed in batches of the profile's opt batch; a model input without a batch dim
takes one sample per entry of a leading axis (the array has one more dim than the input). A folder
is every ``.npz`` in it, in name order, concatenated. ``random`` makes seeded random batches: a
smoke test of the int8 path, not a calibration (its scales mean nothing).

Every problem (a missing or unknown name, a wrong dtype or shape, an empty file, NaN or inf, inputs
with different sample counts) is one :class:`CalibrationDataError` naming the input and the file."""
from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from trt_backend.errors import CalibrationDataError

log = logging.getLogger(__name__)

RANDOM = "random"
RANDOM_SAMPLES = 8
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


@dataclass(frozen=True)
class InputSpec:
    """A model input as calibration data must fit it: name, numpy dtype, dims (None: dynamic)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | None, ...]

    @classmethod
    def of(cls, value: onnx.ValueInfoProto) -> InputSpec:
        tt = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        return cls(value.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)), dims)


@dataclass(frozen=True)
class CalibrationData:
    """Checked calibration batches (feeds of the whole model) and the SHA-256 of their source."""

    source: str
    sha256: str
    batches: tuple[dict[str, np.ndarray], ...] = field(repr=False)
    random: bool = False

    @property
    def samples(self) -> int:
        return sum(len(next(iter(b.values()))) if b else 0 for b in self.batches)


def model_inputs(model: onnx.ModelProto) -> list[InputSpec]:
    inits = {t.name for t in model.graph.initializer}
    return [InputSpec.of(v) for v in model.graph.input if v.name not in inits]


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
                     seed: int = 0) -> CalibrationData:
    """Calibration batches for a model with ``inputs`` from ``source`` (see the module doc).
    ``batch_sizes``: the opt batch per input (default 1, or the input's static batch dim)."""
    sizes = dict(batch_sizes or {})
    if source == RANDOM:
        log.warning("calibration data 'random': a smoke test of the int8 path; its scales are not a calibration")
        return CalibrationData(RANDOM, data_sha256(RANDOM), _random_batches(inputs, sizes, seed), random=True)
    arrays: dict[str, list[np.ndarray]] = {}
    for path in calibration_files(source):
        for name, array in _read_npz(path, inputs).items():
            arrays.setdefault(name, []).append(array)
    samples = {name: np.concatenate(parts) for name, parts in arrays.items()}
    # batches per input: stacked inputs in runs of their opt batch, unbatched ones one entry each
    steps = {s.name: (_batch(s, sizes) if samples[s.name].ndim == len(s.dims) else 0) for s in inputs}
    counts = {n: (-(-len(a) // steps[n]) if steps[n] else len(a)) for n, a in samples.items()}
    if len(set(counts.values())) > 1:
        raise CalibrationDataError(f"calibration data {source}: inputs make different numbers of batches "
                                   f"({', '.join(f'{n}: {c}' for n, c in counts.items())})")
    batches = []
    for k in range(next(iter(counts.values()))):
        feed = {}
        for spec in inputs:
            step, array = steps[spec.name], samples[spec.name]
            feed[spec.name] = array[k * step:(k + 1) * step] if step else array[k]
        if all(len(feed[s.name]) == s.dims[0] for s in inputs if steps[s.name] and s.dims[0] is not None):
            batches.append(feed)  # (a short last batch is dropped only where the batch dim is static)
    if not batches:
        raise CalibrationDataError(f"calibration data {source}: fewer samples than one batch")
    return CalibrationData(source, data_sha256(source), tuple(batches))


def _batch(spec: InputSpec, sizes: Mapping[str, int]) -> int:
    if spec.dims and spec.dims[0] is not None:
        return spec.dims[0]
    return sizes.get(spec.name, 1)


def _read_npz(path: str, inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError) as e:
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
        _check(path, spec, arrays[spec.name])
    return arrays


def _check(path: str, spec: InputSpec, array: np.ndarray) -> None:
    where = f"calibration data {path}: input '{spec.name}'"
    if array.dtype != spec.dtype:
        raise CalibrationDataError(f"{where} is {array.dtype}, the model takes {spec.dtype}")
    rank = len(spec.dims)
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


def _check_dims(where: str, got: tuple[int, ...], want: tuple[int | None, ...], full: tuple[int | None, ...]) -> None:
    if len(got) != len(want) or any(w is not None and g != w for g, w in zip(got, want)):
        raise CalibrationDataError(f"{where}: a sample has shape {tuple(got)}, the model takes {_dims(full)}")


def _dims(dims: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _random_batches(inputs: Sequence[InputSpec], sizes: Mapping[str, int], seed: int
                    ) -> tuple[dict[str, np.ndarray], ...]:
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(RANDOM_SAMPLES):
        feed = {}
        for spec in inputs:
            shape = [_batch(spec, sizes) if k == 0 else (d if d is not None else 1) for k, d in enumerate(spec.dims)]
            if spec.dtype.kind == "f":
                feed[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
            elif spec.dtype.kind == "b":
                feed[spec.name] = np.ones(shape, spec.dtype)
            else:
                feed[spec.name] = np.zeros(shape, spec.dtype)
        batches.append(feed)
    return tuple(batches)
