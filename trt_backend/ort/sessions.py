"""ONNX Runtime sessions made one way: options applied, thread pools followed, refusals as our errors."""
from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from partitioner import Model
from partitioner.errors import OptionsError
from partitioner.cost import si_bytes
from partitioner.model import serialize, structure_copy
from partitioner.weights import external_reference
from trt_backend._progress import progress
from trt_backend._files import write_atomic
from trt_backend.errors import SegmentLoadError, SegmentRunError
from trt_backend.ort.threads import (
    global_thread_pool,
    inference_session,
    use_global_thread_pool,
)

if TYPE_CHECKING:
    from trt_backend.ort.options import OrtOptions

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def ort_errors() -> tuple[type[BaseException], ...]:
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    found = [v for v in vars(state).values() if isinstance(v, type) and issubclass(v, Exception)
             and v.__module__ == state.__name__]
    return tuple(found) + (RuntimeError, ValueError, TypeError)


def runs_whole(model: str | bytes, feeds: Mapping[str, Any]) -> bool:
    """Whether ONNX Runtime (CPU, its messages off) loads ``model`` (a file, its external data
    beside it, or serialized bytes) and runs it on ``feeds``: what a model's own declarations do
    not overrule where they and the feeds disagree (see
    :func:`partitioner.model.untie_contradicted_dims`)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        session = inference_session(model, so)
        session.run(None, dict(feeds), quiet_run())
    except ort_errors() + (OSError,):
        return False
    return True


@functools.lru_cache(maxsize=1)
def quiet_run() -> Any:
    """``onnxruntime.RunOptions`` for a run given none: a kernel's failure is not also logged in
    red on stderr (it comes back as the exception, which the caller turns into its one error).
    One for every such run: never to be stopped (see :func:`own_quiet_run`)."""
    return own_quiet_run()


def own_quiet_run() -> Any:
    """A new ``onnxruntime.RunOptions`` as :func:`quiet_run`'s, for one run its caller may stop
    (``terminate``: a flag no other run shares)."""
    import onnxruntime as ort

    run = ort.RunOptions()
    run.log_severity_level = 4  # fatal only
    return run


# A session of a model this large is worth a progress line: ONNX Runtime spends seconds on one of
# hundreds of MB (a large tree ensemble: ~6 s for 194 MB), and well under one on a smaller model.
_SHOWN_BYTES = 1 << 20


def ort_session(model: onnx.ModelProto | bytes, options: OrtOptions, what: str, *,
                weights_dir: str | None = None, by_address: WeightsByAddress | None = None) -> Any:
    """An ``onnxruntime.InferenceSession`` for ``model``; SegmentLoadError if ORT refuses it.
    ``weights_dir``: the folder ``model``'s external data locations are relative to; ONNX
    Runtime reads the weights from there (the bytes it is given hold none). ``by_address``: the
    values of the initializers ``model`` holds as stubs (see :func:`weights_apart`), which ONNX
    Runtime reads where they are; the caller keeps them alive as long as the session."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if by_address is not None and by_address.names:
        so.add_external_initializers(list(by_address.names),
                                     [ort.OrtValue.ortvalue_from_numpy(a) for a in by_address.arrays])
    if options.shares_global_pool:
        use_global_thread_pool(options.intra_op_threads, options.inter_op_threads)
    so.intra_op_num_threads = options.intra_op_threads  # Under a global pool, its sizes apply instead.
    so.inter_op_num_threads = options.inter_op_threads
    so.log_severity_level = options.log_severity
    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    so.graph_optimization_level = levels[options.graph_optimization_level]
    if options.allow_spinning is not False or global_thread_pool() is not None:
        pass  # ONNX Runtime's default (a global pool spins as the process set it up)
    elif options.spin_while_running:
        so.add_session_config_entry("session.force_spinning_stop", "1")
    else:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if options.share_arena:
        _register_shared_arena()
        so.add_session_config_entry("session.use_env_allocators", "1")
    for lib in options.custom_op_libraries:
        try:
            so.register_custom_ops_library(lib)
        except ort_errors() as e:
            raise OptionsError(f"cannot load custom-op library {lib}: {first_line(e)}") from None
    if weights_dir is not None:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                    os.path.abspath(weights_dir))
    data = model if isinstance(model, bytes) else serialize(model, what)
    if len(data) >= _SHOWN_BYTES:
        progress("loading an ONNX Runtime session for %s (%s)", what, si_bytes(len(data)))
    try:
        session = inference_session(data, so, options.providers, options.disabled_optimizers)
    except ort_errors() as e:
        raise SegmentLoadError(f"{what}: ONNX Runtime cannot load it: {first_line(e)}") from None
    if not options.disabled_optimizers:
        return session
    full = replace(options, disabled_optimizers=())
    return FullSetOnFailure(session, lambda: ort_session(data, full, what, weights_dir=weights_dir,
                                                         by_address=by_address), what)


class FullSetOnFailure:
    """An ``onnxruntime.InferenceSession`` made with some of ONNX Runtime's graph optimizers
    switched off (``OrtOptions.disabled_optimizers``), whose attributes are the session's, and
    whose run, where it fails, is run again on a session made with ONNX Runtime's full set, which
    it keeps from then on: a model ONNX Runtime runs as it is runs here too. Measured, ONNX Runtime
    1.32: with ReshapeFusion off (the default, for empty tensors), its layout transformation at
    level "all" moves a Transpose through a cubic Resize, which then refuses its own scales ("'Cubic'
    mode only supports: 2-D inputs or 4-D inputs with the outermost 2 scale values being 1", the
    interpolated position embeddings of a ViT); with it on, the same model runs. A run stopped on
    purpose (its RunOptions ``terminate`` set) is not run again."""

    def __init__(self, session: Any, full_set: Callable[[], Any], what: str) -> None:
        self._session, self._what = session, what
        self._full_set: Callable[[], Any] | None = full_set

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def run(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        return self._again("run", output_names, input_feed, run_options)

    def run_with_ort_values(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        return self._again("run_with_ort_values", output_names, input_feed, run_options)

    def _again(self, method: str, *args: Any) -> Any:
        session, run_options = self._session, args[-1]
        try:
            return getattr(session, method)(*args[:-1], run_options if run_options is not None else quiet_run())
        except ort_errors() as e:
            full_set, self._full_set = self._full_set, None
            if full_set is None or getattr(run_options, "terminate", False):
                raise
            first = e
        try:
            other = full_set()
            values = getattr(other, method)(*args[:-1], run_options if run_options is not None else quiet_run())
        except ort_errors() + (SegmentLoadError,):
            raise first from None
        log.info("%s: run again with all of ONNX Runtime's graph optimizers, as it failed without some (%s); "
                 "kept so", self._what, first_line(first))
        self._session = other
        return values


@functools.lru_cache(maxsize=1)
def _register_shared_arena() -> None:
    """Once per process: the CPU arena sessions with ``session.use_env_allocators`` share. One
    segment's freed buffers are then reused, still in cache, by the next segment's session."""
    import onnxruntime as ort

    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg({}))


def first_line(e: BaseException) -> str:
    """ONNX Runtime's message in one line: its first, or, where the first announces what follows
    (it ends in a colon: a list of what an op supports), all of its lines run together."""
    text = str(e).strip()
    if not text:
        return type(e).__name__
    lines = text.splitlines()
    if len(lines) == 1 or not lines[0].rstrip().endswith(":"):
        return lines[0]
    joined = " ".join(text.split())
    return joined if len(joined) <= _LINE_MOST else joined[:_LINE_MOST - 3] + "..."


_LINE_MOST = 600  # characters of an error run together into one line


_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino",
                  "onnxruntime-training")


@functools.lru_cache(maxsize=1)
def installed_version() -> str | None:
    """The installed ONNX Runtime's version (None without one), read from its package metadata
    where it is not imported yet: importing it costs a build or an inspect ~0.2 s it needs not."""
    import importlib.metadata
    import importlib.util

    loaded = sys.modules.get("onnxruntime")
    if loaded is not None:
        return str(getattr(loaded, "__version__", "unknown"))
    if importlib.util.find_spec("onnxruntime") is None:
        return None
    for name in _DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    import onnxruntime  # Installed without metadata.

    return str(onnxruntime.__version__)


@functools.lru_cache(maxsize=1)
def max_ir_version() -> int | None:
    """Highest IR version the installed ONNX Runtime accepts (probed once; None without
    onnxruntime). Passed to the partitioner, which has no runtime of its own, so models are
    normalised and segments extracted within it. The answer is remembered on disk per
    onnxruntime and onnx version, so a process that runs nothing (``inspect``) need not import
    onnxruntime to learn it."""
    version = installed_version()
    if version is None:
        return None
    memo_key = f"onnxruntime {version} onnx IR {onnx.IR_VERSION}"
    known = _read_ir_memo().get(memo_key) if memo_key else None
    if isinstance(known, int):
        return known
    found = _probe_ir_version()
    if memo_key and found is not None:
        _write_ir_memo(memo_key, found)
    return found


_IR_MEMO = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trt-backend",
                        "onnxruntime_ir_versions.json")


def _read_ir_memo() -> dict[str, Any]:
    try:
        with open(_IR_MEMO, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_ir_memo(key: str, value: int) -> None:
    try:
        os.makedirs(os.path.dirname(_IR_MEMO), exist_ok=True)
        write_atomic(_IR_MEMO, json.dumps({**_read_ir_memo(), key: value}, indent=1, sort_keys=True))
    except OSError:  # a read-only home: probe next time
        pass


def _probe_ir_version() -> int | None:
    import onnxruntime  # noqa: F401
    from onnx import TensorProto, helper

    for ir in range(int(onnx.IR_VERSION), 6, -1):
        v = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        probe = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [v],
                                                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]),
                                  opset_imports=[helper.make_opsetid("", 13)])
        probe.ir_version = ir
        try:
            inference_session(probe.SerializeToString())
            return ir
        except Exception:  # noqa: BLE001 - any refusal means "not this IR version"
            continue
    return None


TappedRun = Callable[[Mapping[str, Any], Sequence[str]], dict[str, Any]]

# Weights a session may take by address: floats, and the 8-bit ints of quantized weights, of at
# least _BY_ADDRESS_BYTES each. ONNX Runtime's shape inference reads the values of shape-like
# constants (a Reshape's shape, a Resize's scales: small, mostly int64) while it loads the model,
# and cannot read a stub's: those stay in the model.
_BY_ADDRESS_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                               onnx.TensorProto.INT8, onnx.TensorProto.UINT8})
_BY_ADDRESS_BYTES = 4096
_BY_ADDRESS = "(given to ONNX Runtime by address)"  # a stub's location: never a file


@dataclass(frozen=True)
class WeightsByAddress:
    """Initializer values a session takes where they are (``add_external_initializers``)."""

    names: tuple[str, ...]
    arrays: tuple[Any, ...]  # numpy arrays over the model's own raw bytes


def weights_apart(src: onnx.ModelProto) -> tuple[onnx.ModelProto, WeightsByAddress]:
    """A copy of ``src`` whose main-graph weights held inline as raw data (floats and 8-bit ints
    of 4 KiB or more, not graph inputs too) are stubs marked external, with their values as arrays
    over the model's bytes: neither the copy nor its serialized bytes hold those weights, and ONNX Runtime
    takes them by address instead of parsing and copying them (ResNet-50's 97 MiB: ~0.1 s to copy
    the model and as much to serialize it). The rest is copied as it is."""
    inputs = {v.name for v in src.graph.input}
    names: list[str] = []
    arrays: list[Any] = []

    def stub(t: onnx.TensorProto) -> onnx.TensorProto | None:
        inline = t.data_type in _BY_ADDRESS_TYPES and t.name not in inputs \
            and t.data_location != onnx.TensorProto.EXTERNAL
        raw = t.raw_data if inline else b""
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)) if raw else None
        if dtype is None or len(raw) < _BY_ADDRESS_BYTES or len(raw) != int(np.prod(t.dims)) * dtype.itemsize:
            return None  # (copied as it is)
        names.append(t.name)
        arrays.append(np.frombuffer(raw, dtype).reshape(tuple(t.dims)))
        return external_reference(t, _BY_ADDRESS)

    proto = structure_copy(src, stub)
    return proto, WeightsByAddress(tuple(names), tuple(arrays))


def tapped_session(model: Model, names: Sequence[str], options: OrtOptions, what: str, *,
                   time_limit: float | None = None) -> TappedRun:
    """ONNX Runtime on the whole (normalised) ``model`` with the intermediate tensors ``names``
    added to its outputs (typed from shape inference). Returns ``run(feeds, wanted)``: the feeds
    and the value of every output in ``wanted`` by name. SegmentLoadError if ONNX Runtime refuses
    the model, SegmentRunError (ONNX Runtime's first line) if a run fails, or takes longer than
    ``time_limit`` seconds (it is stopped: a Loop with neither a trip count nor an end runs on)."""
    proto, by_address = weights_apart(model.proto)
    graph = proto.graph
    have = {o.name for o in graph.output} | {i.name for i in graph.input}
    for name in names:
        if name not in have:
            vi = graph.output.add()
            vi.name = name
            tp = model.index.types.get(name)
            if tp is not None:
                vi.type.CopyFrom(tp)
            have.add(name)
    sess = ort_session(proto, options, what, weights_dir=model.base_dir, by_address=by_address)
    outputs = {o.name for o in graph.output}

    # (``held``: the weights the session reads where they are, kept as long as it)
    def run(feeds: Mapping[str, Any], wanted: Sequence[str], held: WeightsByAddress = by_address) -> dict[str, Any]:
        fetch = [n for n in dict.fromkeys(wanted) if n in outputs]
        stop = own_quiet_run() if time_limit is not None else None
        timer = threading.Timer(time_limit, setattr, (stop, "terminate", True)) if time_limit is not None else None
        try:
            if timer is not None:
                timer.start()
            values = sess.run(fetch, dict(feeds), stop)
        except ort_errors() as e:
            if stop is not None and stop.terminate:
                raise SegmentRunError(f"it did not end within {time_limit:g} s (stopped)") from None
            raise SegmentRunError(first_line(e)) from None
        finally:
            if timer is not None:
                timer.cancel()
        env = dict(feeds)
        env.update(zip(fetch, values))
        return env

    return run
