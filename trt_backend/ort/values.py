"""Values handed between runners: numpy arrays, OrtValues for dtypes numpy lacks, lists, None."""
from __future__ import annotations

import ctypes
import tokenize
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import onnx

from trt_backend.errors import MemoryLimitError
from trt_backend.ort.sessions import ort_errors
from trt_backend.ort.sizes import available_memory


def is_ml_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is one of ml_dtypes' (bfloat16, float8, int4...), which numpy knows by no
    type number of its own: ONNX Runtime takes such arrays by their ONNX type only."""
    return dtype.type.__module__ != "numpy"


def to_ort_value(value: Any) -> Any:
    """A tensor value as an OrtValue (no copy for contiguous arrays)."""
    import onnxruntime as ort

    if isinstance(value, ort.OrtValue):
        return value
    arr = np.asarray(value)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # Not np.ascontiguousarray: it would turn a 0-d array into a 1-d one.
    if is_ml_dtype(arr.dtype):  # ml_dtypes (bfloat16, float8, int4...): ORT takes the raw bits
        elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
        bits = _SUB_BYTE_BITS.get(elem)
        raw = _pack(arr, bits) if bits else arr.view(np.dtype(f"u{arr.dtype.itemsize}"))
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_element_type=elem)
    return ort.OrtValue.ortvalue_from_numpy(arr)


def _sub_byte_types() -> dict[int, int]:
    names = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2}
    return {int(getattr(onnx.TensorProto, n)): bits for n, bits in names.items() if hasattr(onnx.TensorProto, n)}


_SUB_BYTE_BITS = _sub_byte_types()

NO_NUMPY_TYPES = frozenset(
    f"tensor({onnx.TensorProto.DataType.Name(t).lower()})" for t in onnx.TensorProto.DataType.values()
    if t not in (onnx.TensorProto.UNDEFINED, onnx.TensorProto.STRING)
    and (t in _SUB_BYTE_BITS or is_ml_dtype(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)))))


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
        except ort_errors():
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
    """The shape of a tensor value: a numpy array, an OrtValue tensor or a device array (its
    ``__cuda_array_interface__``); None for sequences, maps, empty optionals."""
    if isinstance(value, np.ndarray):
        return tuple(value.shape)
    if type(value).__name__ == "OrtValue" and value.is_tensor():
        return tuple(value.shape())
    iface = getattr(value, "__cuda_array_interface__", None)
    if iface is not None:
        return tuple(int(d) for d in iface["shape"])
    return None


# The max_memory limit (SessionOptions(max_memory=...), --max-memory) in force in this thread's
# context: the session and the CLI enter it around what they allocate (memory_limit).
_MAX_MEMORY: ContextVar[int | None] = ContextVar("trt_backend_max_memory", default=None)
@contextmanager
def memory_limit(limit: int | None) -> Iterator[None]:
    """Within this block (in this thread), :func:`check_allocation` also refuses tensors larger
    than ``limit`` bytes (None: no limit besides available memory; nested limits: the smaller)."""
    if limit is None:
        yield
        return
    current = _MAX_MEMORY.get()
    token = _MAX_MEMORY.set(limit if current is None else min(limit, current))
    try:
        yield
    finally:
        _MAX_MEMORY.reset(token)


def check_allocation(shape: Sequence[int], dtype: np.dtype, what: str, copies: int = 1) -> None:
    """MemoryLimitError naming ``what`` when an array of ``shape`` and ``dtype`` would need more
    than the max_memory limit in force (:func:`memory_limit`) or than the memory available
    (:func:`~trt_backend.ort.sizes.available_memory`: a container's limit too): one clear line
    instead of an allocation failure or an out-of-memory kill of the process. ``copies``: how many
    arrays of that size making it holds at once (drawing random values: a few), held to the memory
    available."""
    need = int(np.prod([int(d) for d in shape], dtype=object)) * np.dtype(dtype).itemsize
    text = f"{what}: shape {tuple(int(d) for d in shape)} of {np.dtype(dtype)} needs {_size(need)}"
    limit = _MAX_MEMORY.get()  # (a limit on tensors' sizes)
    if limit is not None and need > limit:
        raise MemoryLimitError(f"{text}, more than the max_memory limit (--max-memory) of {_size(limit)}")
    have = available_memory()
    if have is not None and need * copies > have:
        making = f" ({_size(need * copies)} while it is made)" if copies > 1 else ""
        raise MemoryLimitError(f"{text}{making}, and {_size(have)} is available to this process")


def _size(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_npz_sizes(data: Any, path: str) -> None:
    """Each array's size in the opened .npz ``data`` from its header, held to the memory limits
    before numpy allocates it (a header may claim any shape, whatever the file's size); a header
    numpy cannot parse is a ValueError naming the array (numpy's own parser ends in a tokenizer's
    or Python's syntax error there), as the caller's reading of the file reports others."""
    for name, (shape, dtype) in npz_headers(data).items():
        check_allocation(shape, dtype, f"input '{name}' in {path}")


def npz_headers(data: Any) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each array's shape and dtype in the opened .npz ``data``, read from its header (nothing
    loaded); an array of a newer format numpy reads itself is left out. ValueError naming the
    array where a header cannot be parsed."""
    members = set(data.zip.namelist())
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    out = {}
    for name in data.files:
        with data.zip.open(name + ".npy" if name + ".npy" in members else name) as f:
            try:
                reader = readers.get(np.lib.format.read_magic(f))
                if reader is None:
                    continue  # A newer format: numpy checks it itself when loading.
                shape, _, dtype = reader(f)
            except (ValueError, SyntaxError, EOFError, tokenize.TokenError) as e:
                raise ValueError(f"array '{name}': its header cannot be read ({e})") from None
        out[name] = (tuple(int(d) for d in shape), dtype)
    return out
