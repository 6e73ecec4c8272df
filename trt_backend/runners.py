"""Segment runners. One base class validates in :meth:`SegmentRunner.run` and leaves the work to
:meth:`SegmentRunner.run_impl`; runtimes load when a runner is made, never per run.

Values passed between runners are numpy arrays (ONNX Runtime hands them out without a copy),
``OrtValue`` tensors for dtypes numpy lacks (bfloat16, float8, int4...), lists (sequences) or
None (empty optionals). A TensorRT runner (engine builder issue) will subclass
:class:`SegmentRunner` and share its profile checks."""
from __future__ import annotations

import ctypes
import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx

from partitioner import Segment
from partitioner.errors import OptionsError, TrtBackendError
from partitioner.model import serialize
from partitioner.ort_threads import (
    global_thread_pool,
    inference_session,
    use_global_thread_pool,
)

from .profiles import Profile, ProfileError, covering_profile, describe_profile

log = logging.getLogger(__name__)

ONNXRUNTIME, EMULATED, TENSORRT = "onnxruntime", "emulated", "tensorrt"
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")


class SegmentLoadError(TrtBackendError):
    """A segment's runtime refused the segment (e.g. ONNX Runtime cannot load the model)."""


class SegmentRunError(TrtBackendError):
    """A segment failed while running (e.g. ONNX Runtime rejected the data)."""


@dataclass(frozen=True)
class OrtOptions:
    """ONNX Runtime settings shared by every ONNX Runtime session of a Session."""

    intra_op_threads: int = 0  # 0: ONNX Runtime's default
    inter_op_threads: int = 0
    optimization_level: str = "all"  # disable | basic | extended | all
    custom_op_libraries: tuple[str, ...] = ()  # e.g. onnxruntime_extensions.get_library_path()
    providers: tuple[str | tuple[str, dict[str, str]], ...] = ("CPUExecutionProvider",)  # names or (name, options)
    log_severity: int = 3  # 0 verbose .. 4 fatal
    allow_spinning: bool = True  # pool threads spin waiting for work, on after a run too (ORT's default)
    # Where allow_spinning is off: spin while a run is in progress, stop when it returns
    # ("session.force_spinning_stop"). Sessions taking turns then never have idle pools spinning
    # on the cores of the one running, yet each wakes its threads once per run, not once per op.
    spin_while_running: bool = False
    # Allocate from one CPU arena shared by every session that asks for it, registered once per
    # process with onnxruntime.create_and_register_allocator (replacing any registered before).
    share_arena: bool = False
    # Share ONNX Runtime's process-wide intra-op pool (partitioner.ort_threads) instead of one
    # pool per session; the thread counts above then size that pool, once per process.
    global_thread_pool: bool = False


@functools.lru_cache(maxsize=1)
def _ort_errors() -> tuple[type[BaseException], ...]:
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    found = [v for v in vars(state).values() if isinstance(v, type) and issubclass(v, Exception)
             and v.__module__ == state.__name__]
    return tuple(found) + (RuntimeError, ValueError, TypeError)


def ort_session(model: onnx.ModelProto | bytes, options: OrtOptions, what: str) -> Any:
    """An ``onnxruntime.InferenceSession`` for ``model``; SegmentLoadError if ORT refuses it."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if options.global_thread_pool:
        use_global_thread_pool(options.intra_op_threads, options.inter_op_threads)
    so.intra_op_num_threads = options.intra_op_threads  # (under a global pool, its sizes apply instead)
    so.inter_op_num_threads = options.inter_op_threads
    so.log_severity_level = options.log_severity
    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    if options.optimization_level not in levels:
        raise OptionsError(f"unknown optimization level {options.optimization_level!r}; "
                           f"choose one of {', '.join(OPTIMIZATION_LEVELS)}")
    so.graph_optimization_level = levels[options.optimization_level]
    if options.allow_spinning or global_thread_pool() is not None:
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
        except _ort_errors() as e:
            raise OptionsError(f"cannot load custom-op library {lib}: {_first_line(e)}") from None
    data = model if isinstance(model, bytes) else serialize(model, what)
    try:
        return inference_session(data, so, options.providers)
    except _ort_errors() as e:
        raise SegmentLoadError(f"{what}: ONNX Runtime cannot load it: {_first_line(e)}") from None


@functools.lru_cache(maxsize=1)
def _register_shared_arena() -> None:
    """Once per process: the CPU arena sessions with ``session.use_env_allocators`` share. One
    segment's freed buffers are then reused, still in cache, by the next segment's session."""
    import onnxruntime as ort

    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg({}))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# ------------------------------------------------------------------ values

def to_ort_value(value: Any) -> Any:
    """A tensor value as an OrtValue (no copy for contiguous arrays)."""
    import onnxruntime as ort

    if isinstance(value, ort.OrtValue):
        return value
    arr = np.asarray(value)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    if arr.dtype.type.__module__ != "numpy":  # ml_dtypes (bfloat16, float8, int4...): ORT takes the raw bits
        elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
        bits = _SUB_BYTE_BITS.get(elem)
        raw = _pack(arr, bits) if bits else arr.view(np.dtype(f"u{arr.dtype.itemsize}"))
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_element_type=elem)
    return ort.OrtValue.ortvalue_from_numpy(arr)


def _sub_byte_types() -> dict[int, int]:
    names = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2}
    return {int(getattr(onnx.TensorProto, n)): bits for n, bits in names.items() if hasattr(onnx.TensorProto, n)}


_SUB_BYTE_BITS = _sub_byte_types()
_NO_NUMPY_TYPES = frozenset(
    f"tensor({onnx.TensorProto.DataType.Name(t).lower()})" for t in onnx.TensorProto.DataType.values()
    if t not in (onnx.TensorProto.UNDEFINED, onnx.TensorProto.STRING)
    and (t in _SUB_BYTE_BITS or np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)).type.__module__ != "numpy"))


def _pack(arr: np.ndarray, bits: int) -> np.ndarray:
    """Sub-byte elements (one per byte in ml_dtypes) packed as ONNX stores them, low bits first,
    in a uint8 array of the logical shape (ORT takes the shape from it and copies the packed
    bytes from its start)."""
    per = 8 // bits
    flat = arr.reshape(-1).view(np.uint8) & ((1 << bits) - 1)
    flat = np.concatenate([flat, np.zeros((-flat.size) % per, np.uint8)])
    groups = flat.reshape(-1, per)
    packed = np.zeros(groups.shape[0], np.uint8)
    for k in range(per):
        packed |= (groups[:, k] << (k * bits)).astype(np.uint8)
    out = np.zeros(arr.shape, np.uint8)
    out.reshape(-1)[:packed.size] = packed[:out.size]
    return out


def _unpack(data: np.ndarray, bits: int, count: int) -> np.ndarray:
    per = 8 // bits
    parts = [(data >> (k * bits)) & ((1 << bits) - 1) for k in range(per)]
    return np.stack(parts, axis=-1).reshape(-1)[:count].astype(np.uint8)


def to_numpy(value: Any) -> Any:
    """An OrtValue (or a list/None of them) as numpy; dtypes numpy lacks come as ml_dtypes."""
    if value is None or isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)):
        return [to_numpy(v) for v in value]
    if type(value).__name__ != "OrtValue":
        return value
    elem = value.element_type()
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    if elem not in _SUB_BYTE_BITS:
        try:
            arr = value.numpy()
        except _ort_errors():
            arr = None  # numpy has no such dtype: read the bits
        if arr is not None:
            # ORT hands float8 out as uint8: same bits, reinterpret
            return arr if arr.dtype == dtype or arr.dtype.itemsize != dtype.itemsize else arr.view(dtype)
    shape = tuple(value.shape())
    size = value.tensor_size_in_bytes()
    raw = np.frombuffer(bytes((ctypes.c_uint8 * size).from_address(value.data_ptr())) if size else b"", np.uint8)
    if elem in _SUB_BYTE_BITS:
        raw = _unpack(raw, _SUB_BYTE_BITS[elem], int(np.prod(shape, dtype=np.int64)))
        return raw.view(dtype).reshape(shape)
    return raw.view(dtype).reshape(shape)


def shape_of(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, np.ndarray):
        return tuple(value.shape)
    if type(value).__name__ == "OrtValue" and value.is_tensor():
        return tuple(value.shape())
    return None


# ------------------------------------------------------------------ runners

class SegmentRunner(ABC):
    """Runs one segment. ``run`` checks what it is given (and, for TensorRT-role runners, that
    the shapes fit one of the segment's profiles, as an engine would demand), then calls
    ``run_impl``."""

    executor: ClassVar[str] = "?"

    def __init__(self, segment: Segment, profiles: Sequence[Profile] = (),
                 shape_tensors: frozenset[str] = frozenset()) -> None:
        self.segment = segment
        self.input_names = tuple(segment.inputs)
        self.output_names = tuple(segment.outputs)
        self.profiles = list(profiles)
        self.shape_tensors = shape_tensors
        self._fits: dict[Any, int] = {}  # input shapes (and shape-tensor values) -> fitting profile

    def __repr__(self) -> str:
        return f"<{type(self).__name__} segment {self.segment.id} ({self.segment.backend}, {self.executor})>"

    @property
    def label(self) -> str:
        return f"segment {self.segment.id} ({self.segment.backend}, executor {self.executor})"

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        if len(inputs) != len(self.input_names):
            raise ValueError(f"{self.label}: got {len(inputs)} input(s), expected {len(self.input_names)}")
        if self.profiles:
            self.select_profile(inputs)
        outputs = self.run_impl(inputs)
        if len(outputs) != len(self.output_names):
            raise RuntimeError(f"{self.label}: produced {len(outputs)} output(s), expected {len(self.output_names)}")
        return outputs

    def select_profile(self, inputs: Sequence[Any]) -> int:
        """Index of the first profile that fits every input; ProfileError when none does."""
        shapes: dict[str, tuple[int, ...]] = {}
        values: dict[str, tuple[int, ...]] = {}
        for name, value in zip(self.input_names, inputs):
            shape = shape_of(value)
            if shape is not None:
                shapes[name] = shape
                if name in self.shape_tensors:
                    values[name] = tuple(int(v) for v in np.asarray(to_numpy(value)).reshape(-1))
        key = (tuple(shapes.items()), tuple(values.items()))
        k = self._fits.get(key)
        if k is not None:
            return k
        k = covering_profile(self.profiles, shapes, values)
        if k is not None:
            if len(self._fits) < 256:  # a serving loop sees few distinct shapes; bounded all the same
                self._fits[key] = k
            return k
        def misfits(n: str, p: Profile) -> bool:
            return n in p and (not p[n].covers(shapes[n]) or not p[n].covers_values(values.get(n, ())))

        def refused_by_all(n: str) -> bool:
            bounding = [p for p in self.profiles if n in p]
            return bool(bounding) and all(misfits(n, p) for p in bounding)

        # name an input no profile takes, if there is one (else the first that some profile refuses)
        name = next((n for n in shapes if refused_by_all(n)), None) \
            or next(n for n in shapes if any(misfits(n, p) for p in self.profiles))
        allowed = "; ".join(f"profile {i}: {describe_profile(p[name])}" for i, p in enumerate(self.profiles) if name in p)
        got = f"shape {shapes[name]}" + (f" and values {values[name]}" if name in values else "")
        raise ProfileError(f"{self.label}: input '{name}' has {got}, outside its profiles ({allowed}). Its shape "
                           f"depends on data or on inputs the profiles do not bound; give '{name}' a profile, e.g. "
                           f"profiles=[{{..., '{name}': (min_shape, opt_shape, max_shape)}}]")

    @abstractmethod
    def run_impl(self, inputs: Sequence[Any]) -> list[Any]:
        """Run on validated inputs (in ``input_names`` order); outputs in ``output_names`` order."""

    def close(self) -> None:
        """Release runtime resources."""


class OnnxRuntimeRunner(SegmentRunner):
    """A segment run by an ONNX Runtime session created once, here."""

    executor: ClassVar[str] = ONNXRUNTIME

    def __init__(self, segment: Segment, model: onnx.ModelProto, options: OrtOptions,
                 profiles: Sequence[Profile] = (), shape_tensors: frozenset[str] = frozenset()) -> None:
        super().__init__(segment, profiles, shape_tensors)
        self._session = ort_session(model, options, f"segment {segment.id} ({segment.backend})")
        ios = list(self._session.get_inputs()) + list(self._session.get_outputs())
        # ``run`` takes numpy arrays or OrtValues and hands numpy out without copying; dtypes
        # numpy lacks (bfloat16, float8, int4...) need OrtValues in and out.
        self._ort_values = any(a.type in _NO_NUMPY_TYPES for a in ios)

    def run_impl(self, inputs: Sequence[Any]) -> list[Any]:
        session = self._session  # (one read: close() from another thread cannot pull it away mid-run)
        if session is None:
            raise SegmentRunError(f"{self.label} is closed (its Session was closed, or the runner replaced)")
        inputs = [v.to_host() if hasattr(v, "to_host") else v for v in inputs]  # device arrays: to the CPU
        try:
            if self._ort_values:
                feeds = {n: to_ort_value(v) for n, v in zip(self.input_names, inputs)}
                return list(session.run_with_ort_values(self.output_names, feeds))
            return list(session.run(self.output_names, dict(zip(self.input_names, inputs))))
        except _ort_errors() as e:
            raise SegmentRunError(f"{self.label} failed: {_first_line(e)}") from None

    def close(self) -> None:
        self._session = None


class EmulatedTensorRTRunner(OnnxRuntimeRunner):
    """A TensorRT segment run through ONNX Runtime on CPU, holding the segment to its
    profiles as an engine would."""

    executor: ClassVar[str] = EMULATED


def _cuda_device_count() -> int:
    from .gpu.device import cuda_device_count

    return cuda_device_count()


# SMs TensorRT-RTX 1.7 builds for (DESIGN.md): data-centre Hopper/Blackwell parts are not among them.
_RTX_SMS = frozenset({(7, 5), (8, 0), (8, 6), (8, 9), (12, 0), (12, 1)})


@functools.lru_cache(maxsize=1)
def tensorrt_status() -> tuple[bool, str]:
    """(can TensorRT segments execute here, why not)."""
    from .flavor import TensorRTUnavailableError, load_flavor

    try:
        flavor = load_flavor("auto")
    except TensorRTUnavailableError as e:
        return False, str(e)
    devices = _cuda_device_count()
    if devices == 0:
        return False, f"{flavor.target} is installed but no CUDA device is usable"
    if flavor.is_rtx:
        from .gpu.device import compute_capability

        sm = compute_capability()
        if sm not in _RTX_SMS:
            return False, f"{flavor.target} cannot run on this GPU (SM {sm[0]}.{sm[1]}); install full TensorRT"
    return True, f"{flavor.target} on {devices} CUDA device(s)"


def make_tensorrt_runner(segment: Segment, engine: bytes | None, profiles: Sequence[Profile],
                         shape_tensors: frozenset[str], **kw: Any) -> SegmentRunner:
    """A runner executing ``segment``'s engine on the GPU (see gpu/trt_runner.py)."""
    from .flavor import TensorRTUnavailableError, load_flavor

    ok, why = tensorrt_status()
    if not ok:
        raise TensorRTUnavailableError(f"cannot execute segment {segment.id} on TensorRT: {why}; "
                                       "use emulate=True (or 'auto') to run it through ONNX Runtime")
    if engine is None:
        raise TensorRTUnavailableError(f"segment {segment.id} has no engine")
    from .gpu.trt_runner import TensorRTRunner

    return TensorRTRunner(segment, engine, load_flavor("auto"), profiles, shape_tensors, **kw)
