"""Model inputs and outputs as onnxruntime describes them, and feed validation.

Every check runs before any segment does: unknown or missing names, non-array values, wrong
dtype or rank, fixed dims, and shapes outside every profile all fail with one
:class:`FeedError` that names the input, what was expected and what was given."""
from __future__ import annotations

import io
import mmap
import os
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from partitioner.model import declared_unknown
from partitioner.wire import graph_inputs
from trt_backend._files import npz_problem, write_atomic
from trt_backend.errors import FeedError
from trt_backend.gpu.memory import as_device_array
from trt_backend.ort.random_data import Categories, ValueRange, random_feed
from trt_backend.ort.sessions import first_line
from trt_backend.ort.values import check_npz_sizes
from trt_backend.profiles.given import example_shapes
from trt_backend.profiles.node_arg import NodeArg, node_arg, shape_text
from trt_backend.profiles.profile import Profile, describe_profile


def _given(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {tuple(value.shape)}"
    return type(value).__name__


class FeedValidator:
    """Checks a feed dict against the model's inputs and profiles; returns arrays ready to run."""

    def __init__(self, inputs: Sequence[NodeArg], outputs: Sequence[NodeArg], profiles: Sequence[Profile],
                 initializers: frozenset[str] = frozenset(), *, shared_dims: bool = True,
                 shape_tensors: frozenset[str] = frozenset()) -> None:
        """``initializers``: the model's initializer names, named as such where a feed gives one
        (a graph input with a default, which ONNX Runtime lets a caller override). ``shared_dims``
        False: dims the inputs name alike are not held equal (samples a model is yet to be loaded
        for, whose load drops a name they contradict). ``shape_tensors``: inputs a TensorRT segment
        reads as shapes, whose values the profiles bound too."""
        self.shared_dims = shared_dims
        self.shape_tensors = shape_tensors
        self.inputs = list(inputs)
        self.initializers = initializers
        self.outputs = list(outputs)
        self.profiles = list(profiles)
        # the shape tensors whose profiles bound their values: checked by value too
        self._valued = frozenset(n for p in self.profiles for n, tp in p.items()
                                 if tp.values is not None and n in shape_tensors)
        self._by_name = {a.name: a for a in self.inputs}
        self._output_names = [a.name for a in self.outputs]
        self._all_outputs = tuple(self._output_names)
        self._output_set = set(self._output_names)
        # Feeds of numpy arrays that passed every check, by (name, dtype, shape) of each: a feed
        # of the same kinds passes again without the checks (a serving loop feeds the same few).
        self._passed: dict[tuple[tuple[Any, ...], ...], None] = {}

    def output_names(self, requested: Sequence[str] | None) -> tuple[str, ...]:
        """The outputs asked for; None or an empty list: every output, as ONNX Runtime takes them."""
        if requested is None or (isinstance(requested, (list, tuple)) and not requested):
            return self._all_outputs
        if not isinstance(requested, (str, bytes, Mapping)) and isinstance(requested, Iterable):
            requested = list(requested)  # (a numpy array of names, dict keys, a generator: as ONNX Runtime takes them)
            if not requested:
                return self._all_outputs
        if isinstance(requested, str) or not isinstance(requested, Sequence):
            raise FeedError(f"output names must be a list of names or None, got {type(requested).__name__}")
        bad = [n for n in requested if not isinstance(n, str) or n not in self._output_set]
        if bad:
            raise FeedError(f"unknown output name(s) {', '.join(repr(b) for b in bad)}; "
                            f"the model's outputs are: {', '.join(self._output_names)}")
        return tuple(requested)

    def validate(self, feeds: Any) -> dict[str, Any]:
        """Checked and normalised feeds (numpy scalars become 0-d arrays)."""
        key = self._key(feeds)
        if key is not None and key in self._passed:
            return dict(feeds)
        out = self._validate(feeds)
        if key is not None and all(out[n] is v for n, v in feeds.items()):  # (nothing normalised)
            if len(self._passed) >= _PASSED_KEPT:
                self._passed.clear()
            self._passed[key] = None
        return out

    def _key(self, feeds: Any) -> tuple[tuple[Any, ...], ...] | None:
        """What decides whether ``feeds`` pass: each input's name, dtype and shape (and the values
        of an input read as a shape), where every value is a plain numpy array and every input is
        given once (else None: checked in full)."""
        if type(feeds) is not dict or len(feeds) != len(self._by_name):
            return None
        key: list[tuple[Any, ...]] = []
        for name, value in feeds.items():
            if type(value) is not np.ndarray:
                return None
            key.append((name, value.dtype, value.shape) if name not in self.shape_tensors else
                       (name, value.dtype, value.shape, value.tobytes() if value.size <= 64 else None))
        return tuple(key)

    def _validate(self, feeds: Any) -> dict[str, Any]:
        if not isinstance(feeds, Mapping):
            raise FeedError(f"feeds must be a dict of input name -> numpy array, got {type(feeds).__name__}")
        unknown = [k for k in feeds if k not in self._by_name]
        fixed = [k for k in unknown if k in self.initializers]
        if fixed:
            raise fed_initializers(fixed)
        if unknown:
            raise FeedError(f"unknown input {', '.join(repr(k) for k in unknown)}; the model's inputs are: "
                            + ", ".join(f"'{a.name}' {a.type} {shape_text(a.shape)}" for a in self.inputs))
        missing = [a for a in self.inputs if a.name not in feeds]
        if missing:
            raise FeedError("missing input " + ", ".join(f"'{a.name}' (expected {a.type} of shape "
                                                         f"{shape_text(a.shape)})" for a in missing))
        out: dict[str, Any] = {}
        problems: list[str] = []
        for arg in self.inputs:
            value, problem = _check_value(arg, feeds[arg.name])
            if problem:
                problems.append(problem)
            out[arg.name] = value
        if problems:
            raise FeedError("; ".join(problems))
        if self.shared_dims:
            _check_shared_dims(self.inputs, out)
        self.check_profiles({n: tuple(v.shape) for n, v in out.items() if _is_array(v)},
                            {n: tuple(int(x) for x in v.reshape(-1)) for n, v in out.items()
                             if n in self._valued and isinstance(v, np.ndarray) and v.dtype.kind in "iu"
                             and v.size <= 64})
        return out

    def check_profiles(self, shapes: Mapping[str, tuple[int, ...]],
                       values: Mapping[str, tuple[int, ...]] | None = None) -> int | None:
        """Index of the first profile covering every fed shape (and the ``values`` of inputs whose
        profiles give values: shape tensors, which TensorRT reads when it runs); FeedError when
        none does."""
        if not self.profiles:
            return None
        values = values or {}
        misses: list[tuple[int, str, tuple[int, ...]]] = []
        for k, profile in enumerate(self.profiles):
            bad = [(n, tuple(s)) for n, s in shapes.items() if n in profile and (
                not profile[n].covers(s) or (n in values and not profile[n].covers_values(values[n])))]
            if not bad:
                return k
            misses.append((k, *bad[0]))
        names = {n for _, n, _ in misses}
        if len(names) == 1:
            name, got = misses[0][1], misses[0][2]
            if name in values and all(self.profiles[k][name].covers(got) for k, _, _ in misses):
                raise FeedError(f"input '{name}': values {values[name]} are outside every profile (TensorRT reads "
                                "it as a shape: its values are part of the profile): " + "; ".join(
                                    f"profile {k} allows {describe_profile(self.profiles[k][name])}"
                                    for k, _, _ in misses))
            raise FeedError(f"input '{name}': shape {got} is outside every profile: " + "; ".join(
                f"profile {k} allows {describe_profile(self.profiles[k][name])}" for k, _, _ in misses))
        raise FeedError("the feeds fit no profile: " + "; ".join(
            f"profile {k}: input '{n}' has shape {s}, allowed {describe_profile(self.profiles[k][n])}"
            for k, n, s in misses))


def fed_initializers(names: Sequence[str]) -> FeedError:
    """The error for feeds that give the model's initializers."""
    return FeedError(f"{', '.join(repr(k) for k in names)}: the model's initializer(s) (a graph input with a default "
                     "value, or a weight), which trt-backend builds in as the model stores them: they cannot be fed "
                     "(ONNX Runtime lets a feed override a graph input's default); drop them from the feeds, or "
                     "change the model's initializer")


_PASSED_KEPT = 64  # feed kinds remembered as passed (beyond: forgotten, checked again)


def values_as(data: Any, dtype: np.dtype) -> tuple[np.ndarray | None, str | None]:
    """``data`` (nested lists, JSON values) as an array of ``dtype`` where that holds every value
    as given, else (None, what it would change): text for a number (a float takes "NaN",
    "Infinity", "-Infinity" and numbers written as text), a fraction or a non-finite number for an
    integer, an integer ``dtype`` cannot hold, anything but 0 and 1 for a boolean (numpy's cast
    truncates 1.7 to 1 and wraps 300 to 44 without a word); a string input takes text only. Session
    feeds given as lists and serve's JSON requests are read so."""
    try:
        raw = np.asarray(data)
    except (ValueError, TypeError, RecursionError) as e:
        return None, f"cannot read the values as {dtype}: {first_line(e)}"
    if raw.size == 0 or raw.dtype == dtype:
        return raw.astype(dtype), None
    text = raw.dtype.kind in "USO"
    if dtype.kind in "USO":
        if not text:
            return None, f"got {raw.dtype} values where the model takes text"
        return raw.astype(dtype), None
    if text and dtype.kind not in "fc":
        return None, f"got text (or values of mixed kinds) where the model takes {dtype}"
    if dtype.kind in "iu" and raw.dtype.kind in "fc":
        bad = ~np.isfinite(raw) | (raw != np.round(raw.real))
        if bad.any():
            return None, f"{dtype} takes whole numbers, got {raw[bad].reshape(-1)[0].item()!r}"
    if dtype.kind in "iu" and raw.dtype.kind in "biuf":
        info = np.iinfo(dtype)
        if raw.min() < info.min or raw.max() > info.max:
            return None, f"values {raw.min()}..{raw.max()} do not fit {dtype} ({info.min}..{info.max})"
    if dtype.kind == "b" and not np.isin(raw, (0, 1)).all():
        flat = raw.reshape(-1)
        return None, f"bool takes 0 and 1 (or true and false), got {flat[~np.isin(flat, (0, 1))][0].item()!r}"
    try:
        return raw.astype(dtype), None
    except (ValueError, TypeError, OverflowError) as e:
        return None, f"cannot read the values as {dtype}: {first_line(e)}"


def _check_value(arg: NodeArg, value: Any) -> tuple[Any, str | None]:
    """(normalised value, problem or None) for one input."""
    kind = arg.kind
    if kind == "optional":
        if value is None:
            return None, None
        inner = arg.type[len("optional("):-1]
        kind = inner.split("(", 1)[0]
    if kind == "seq":
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, np.ndarray) for v in value):
            return value, f"input '{arg.name}': expected a list of numpy arrays ({arg.type}), got {_given(value)}"
        return list(value), None
    if kind == "map":
        if not isinstance(value, (dict, list)):
            return value, f"input '{arg.name}': expected a dict ({arg.type}), got {_given(value)}"
        return value, None
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if hasattr(value, "__cuda_array_interface__"):  # CuPy, PyTorch, pycuda: used in place, no copy

        value = as_device_array(value)
    elif not isinstance(value, np.ndarray):
        if _is_ort_value(value):
            return value, None  # already a runtime value; onnxruntime checks it
        if not (isinstance(value, (list, tuple)) and kind == "tensor" and arg.dtype is not None):
            return value, f"input '{arg.name}': expected a numpy array ({arg.type}), got {_given(value)}"
        array, problem = values_as(value, arg.dtype)  # (nested lists: ONNX Runtime takes them too; then checked
        if array is None:                             # as arrays are)
            return value, f"input '{arg.name}': {problem}"
        value = array
    if arg.dtype is not None and value.dtype != arg.dtype and value.dtype.kind == arg.dtype.kind \
            and value.dtype.newbyteorder("=") == arg.dtype:  # the same type in the other byte order
        value = value.astype(arg.dtype)
    if arg.dtype is not None and value.dtype != arg.dtype:
        if not (arg.dtype == np.dtype(object) and value.dtype.kind in "OU"):
            return value, (f"input '{arg.name}': expected dtype {arg.dtype} ({arg.type}), "
                           f"got {value.dtype} array of shape {tuple(value.shape)}")
    if arg.dtype == np.dtype(object) and value.dtype.kind == "U":
        value = value.astype(object)
    if arg.rank is not None:
        if value.ndim != arg.rank:
            return value, (f"input '{arg.name}': expected rank {arg.rank} (shape {shape_text(arg.shape)}), "
                           f"got shape {tuple(value.shape)}")
        for axis, (want, got) in enumerate(zip(arg.shape, value.shape)):
            if isinstance(want, int) and want != got:
                return value, (f"input '{arg.name}': dim {axis} must be {want} (shape {shape_text(arg.shape)}), "
                               f"got shape {tuple(value.shape)}")
    return value, None


def _check_shared_dims(inputs: Sequence[NodeArg], feeds: Mapping[str, Any]) -> None:
    """Dims the model names alike are one size (ONNX: a dim_param names one value throughout the
    graph): inputs fed otherwise (a token sequence of 18 beside a mask of 10) are one error naming
    both, where the run would fail deep inside with the runtime's broadcast error."""
    seen: dict[str, tuple[str, int, int]] = {}
    for arg in inputs:
        value: Any = feeds.get(arg.name)
        if arg.rank is None or not _is_array(value) or len(value.shape) != len(arg.shape):
            continue
        for axis, dim in arg.named_dims():
            size = value.shape[axis]
            first = seen.setdefault(dim, (arg.name, axis, int(size)))
            if first[2] != int(size):
                raise FeedError(f"inputs '{first[0]}' and '{arg.name}' share the dim '{dim}' (dim {first[1]} of "
                                f"'{first[0]}', dim {axis} of '{arg.name}'), given as {first[2]} and {int(size)}")


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__")


def _is_ort_value(value: Any) -> bool:
    cls = type(value)
    return cls.__name__ == "OrtValue" and cls.__module__.startswith("onnxruntime")


def random_feeds(inputs: Sequence[NodeArg], shapes: Mapping[str, Sequence[int]], seed: int = 0,
                 val_range: Any = None, int_range: Any = None) -> dict[str, Any]:
    """Seeded random tensors drawn by :func:`trt_backend.ort.random_data.random_feed` (its module
    doc gives the ranges; ``val_range``/``int_range`` as :func:`value_ranges` reads them). ``shapes``
    gives the shape of every input whose shape is not fully fixed."""
    for arg in inputs:
        if arg.kind != "tensor" or arg.dtype is None:
            raise FeedError(f"input '{arg.name}' is {arg.type}; random data is only made for tensors, "
                            "pass this input explicitly")
    missing = [a for a in inputs if a.name not in shapes and (a.rank is None or a.is_dynamic)]
    if missing:  # all of them in one message, with a --shapes line to paste
        example = example_shapes(missing, inputs, shapes)
        if len(missing) == 1:
            raise FeedError(f"input '{missing[0].name}' has dynamic shape {shape_text(missing[0].shape)}; give its "
                            f"shape (e.g. --shapes {example})")
        listed = ", ".join(f"'{a.name}' {shape_text(a.shape)}" for a in missing)
        raise FeedError(f"{len(missing)} inputs have dynamic shapes: {listed}; give their shapes (e.g. --shapes "
                        f"{example})")
    tensors = [(arg.name, arg.dtype,
                tuple(int(d) for d in (shapes[arg.name] if arg.name in shapes  # type: ignore[arg-type]
                                       else arg.shape)))
               for arg in inputs]
    return dict(random_feed(tensors, seed, value_ranges(inputs, val_range, int_range)))  # type: ignore[arg-type]


def value_ranges(inputs: Sequence[NodeArg], val_range: Any = None, int_range: Any = None
                 ) -> dict[str, ValueRange]:
    """The range random data is drawn from, per input name, at every door (run, bench, compare):
    integer inputs from ``int_range``, the rest from ``val_range`` (each one (low, high) pair for
    every such input, or a pair per input name); an integer input given none takes its own
    ``int_range`` where it has one, and an input of any dtype the categories a OneHotEncoder knows
    (the graph's, see :func:`trt_backend.ort.random_data.index_ranges`). A range for a name that
    is no input is a FeedError."""
    out: dict[str, ValueRange] = {}
    for arg in inputs:
        integer = arg.dtype is not None and arg.dtype.kind in "iu"
        given = int_range if integer else val_range
        pick = given.get(arg.name) if isinstance(given, Mapping) else given
        if pick is None and (integer or isinstance(arg.int_range, Categories)):
            pick = arg.int_range
        if pick is not None:
            out[arg.name] = pick if isinstance(pick, Categories) else tuple(pick)  # type: ignore[assignment]
    for given in (val_range, int_range):
        unknown = [n for n in given if n not in {a.name for a in inputs}] if isinstance(given, Mapping) else []
        if unknown:
            raise FeedError(f"value range for unknown input(s) {', '.join(unknown)}; the model's inputs are "
                            f"{', '.join(a.name for a in inputs)}")
    return out


# ------------------------------------------------------------------ user profiles of model inputs




def check_samples(inputs: Sequence[NodeArg], feeds: Sequence[Mapping[str, Any]], where: str,
                  profiles: Sequence[Profile] = (), runs: Callable[[Mapping[str, Any]], bool] | None = None) -> bool:
    """``feeds`` held to the model's ``inputs`` before profiles are made from them, as a run checks
    feeds (:class:`FeedValidator`: names, dtypes, ranks, fixed and shared dims, and ``profiles``
    where there are some already, a build folder's), so that a missing input is named as missing
    and a sample of the wrong rank as such, not as a profile without that input or of the wrong
    rank. ``where``: what the feeds came from. Dims the inputs name alike and a sample sizes
    differently are refused unless ``runs`` (ONNX Runtime running the model, where given) takes
    that sample: a name ONNX Runtime does not hold to is the exporter's mistake, which the model's
    load then drops (:func:`partitioner.model.untie_contradicted_dims`). Returns whether it took
    such a sample."""
    validator = FeedValidator(inputs, (), profiles, shared_dims=False)
    untied = False
    for k, feed in enumerate(feeds):
        which = f" (input set {k})" if len(feeds) > 1 else ""
        try:
            checked = validator.validate(feed)
            try:
                _check_shared_dims(inputs, checked)
            except FeedError:
                if runs is None or not runs(checked):
                    raise
                untied = True
        except FeedError as e:
            raise FeedError(f"{where}{which}: {e}") from None
    return untied


def model_file_inputs(path: str) -> list[NodeArg] | None:
    """The inputs the ONNX file at ``path`` takes, as :class:`NodeArg`, read from its bytes
    without parsing the whole model (:func:`partitioner.wire.graph_inputs`: only the inputs' own
    few bytes are parsed); None where the file cannot be read that way (the model's own load then
    says what is wrong with it)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            found = graph_inputs(view)
        if found is None:
            return None
        infos = [onnx.ValueInfoProto.FromString(info) for _, info in found]
        for vi in infos:  # dims declared as -1, 0 or '?' are unknown, as the model's own load takes them
            if vi.type.WhichOneof("value") == "tensor_type":
                for d in vi.type.tensor_type.shape.dim:
                    if declared_unknown(d):
                        d.Clear()
        return [node_arg(name, vi.type) for (name, _), vi in zip(found, infos)]
    except (OSError, ValueError, DecodeError):
        return None




# ------------------------------------------------------------------ feeds and outputs in files

def read_feeds(path: str, what: str = "--inputs") -> list[dict[str, Any]]:
    """Feeds from ``path``: an ``.npz`` holding one feed (arrays by input name), or several
    (``<k>/<name>``, or ``inputs/<k>/<name>`` as :func:`write_run` writes them), or a folder of
    such files, read in name order (samples of different shapes are separate files or feeds).
    Each array's size is held to the memory limits from its header, before it is read."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".npz"))
        if not files:
            raise FeedError(f"{what} {path}: the folder holds no .npz file")
        return [feed for f in files for feed in read_feeds(f, what)]
    return _read_runs(path, what)[0]


def read_run(path: str, what: str = "--load-outputs") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(feeds, outputs) of a run saved by :func:`write_run`, feed ``k`` with output ``k``."""
    feeds, outputs = _read_runs(path, what)
    if not outputs:
        raise FeedError(f"{what} {path}: holds no outputs (write one with compare --save-outputs)")
    if len(outputs) != len(feeds):
        raise FeedError(f"{what} {path}: {len(feeds)} input set(s) but {len(outputs)} output set(s)")
    return feeds, outputs


def write_run(path: str, feeds: Sequence[Mapping[str, Any]], outputs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Write feeds and outputs (``inputs/<k>/<name>``, ``outputs/<k>/<name>``) to ``path``
    atomically, string tensors as unicode arrays (what :func:`read_run` reads back); returns the
    names of the outputs left out, which an .npz cannot hold without pickling (sequences, maps,
    empty optionals)."""
    arrays: dict[str, np.ndarray] = {}
    for k, feed in enumerate(feeds):
        arrays.update({f"inputs/{k}/{n}": a for n, v in feed.items() if (a := storable(v)) is not None})
    left: dict[str, None] = {}
    for k, out in enumerate(outputs):
        for n, v in out.items():
            stored = storable(v)
            if stored is None:
                left[n] = None
            else:
                arrays[f"outputs/{k}/{n}"] = stored
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    write_atomic(path, buffer.getvalue())
    return list(left)


def storable(value: Any) -> np.ndarray | None:
    """``value`` as an array an .npz holds without pickling (strings as unicode); None where it
    is not a tensor."""
    if not isinstance(value, np.ndarray):
        return None
    if value.dtype != object:
        return value
    if all(isinstance(x, str) for x in value.flat):
        return value.astype(str)
    return None


def _read_runs(path: str, what: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    try:
        problem = npz_problem(path)
    except FileNotFoundError:
        raise FeedError(f"{what} {path}: no such file") from None
    except OSError as e:
        raise FeedError(f"{what} {path}: cannot read it ({e.strerror or e})") from None
    if problem:
        raise FeedError(f"{what} {path}: {problem}")
    try:
        with np.load(path, allow_pickle=False) as data:
            check_npz_sizes(data, path)
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise FeedError(f"{what} {path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise FeedError(f"{what} {path}: cannot read it as .npz ({e})") from None
    if not arrays:
        raise FeedError(f"{what} {path}: holds no arrays")
    numbered = {k: _RUN_KEY.fullmatch(k) for k in arrays}
    if not any(numbered.values()):  # one feed by input name (names may hold "/": TensorFlow's do)
        return [arrays], []
    feeds: dict[int, dict[str, Any]] = {}
    outputs: dict[int, dict[str, Any]] = {}
    for key, value in arrays.items():
        match = numbered[key]
        if match is None:
            raise FeedError(f"{what} {path}: array '{key}' is not <k>/<name> or inputs/<k>/<name> (or outputs/...), "
                            "as the file's other arrays are; a file of one input set names its arrays by input "
                            "name alone")
        side = outputs if match.group("side") == "outputs" else feeds
        side.setdefault(int(match.group("k")), {})[match.group("name")] = value
    return [feeds[k] for k in sorted(feeds)], [outputs[k] for k in sorted(outputs)]


# <k>/<name> or inputs/<k>/<name> or outputs/<k>/<name>; the name itself may hold "/"
_RUN_KEY = re.compile(r"(?:(?P<side>inputs|outputs)/)?(?P<k>[0-9]+)/(?P<name>.+)", re.DOTALL)




def rows_interact(run: Callable[[dict[str, Any], list[str]], Sequence[Any]], inputs: Sequence[NodeArg],
                  shapes: Mapping[str, Sequence[int]], batched: Sequence[str], outputs: Sequence[str],
                  rows: int = 1, seed: int = 0) -> str | None:
    """Whether a model's rows depend on each other, so that batching requests together (serve,
    Triton's dynamic batcher) changes answers: ``run(feeds, outputs)`` on seeded random inputs at
    ``shapes`` (``batched`` inputs leading with more than ``rows`` rows), and again on their first
    ``rows`` rows alone; an output whose first rows differ (beyond what kernels of two batch
    sizes round differently, in fp16 too: 1e-2 relative and 1e-2 of the output's largest
    magnitude; a statistic over the batch moves values by their own size) is named with how far.
    Integer outputs (labels an arg-max of near ties may flip) count only where no float output
    does. None where every output's first rows are the same."""
    feeds = random_feeds(inputs, shapes, seed=seed)
    alone = {n: (v[:rows] if n in batched else v) for n, v in feeds.items()}
    together, single = run(feeds, list(outputs)), run(alone, list(outputs))
    floats = any(np.asarray(v).dtype.kind in "fc" for v in together)
    for name, many, one in zip(outputs, together, single):
        many, one = np.asarray(many), np.asarray(one)
        if many.ndim == 0 or one.ndim == 0 or many.shape[1:] != one.shape[1:] or one.shape[0] != rows:
            continue
        first = many[:rows]
        if first.dtype.kind in "fc":
            scale = float(np.nanmax(np.abs(many))) if many.size else 0.0
            close = np.isclose(first, one, rtol=1e-2, atol=1e-2 * scale, equal_nan=True)
            if not close.all():
                gap = float(np.nanmax(np.abs(first.astype(np.float64) - one.astype(np.float64))))
                return (f"output '{name}' differs by up to {gap:.3g} on the same rows run with "
                        f"{many.shape[0] - rows} more row(s) than alone: the model's rows depend on each other (a "
                        "statistic over the batch?), so batched requests would change each other's answers")
        elif first.dtype.kind in "iub" and not floats and not np.array_equal(first, one):
            return (f"output '{name}' differs on the same rows run with {many.shape[0] - rows} more row(s) than "
                    "alone: the model's rows depend on each other, so batched requests would change each other's "
                    "answers")
    return None
