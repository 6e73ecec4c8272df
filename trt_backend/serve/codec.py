"""The HTTP interface's bodies: JSON or NumPy ``.npz``, both ways.

JSON request: ``{"inputs": {"image": <nested list>}}`` (cast to the model input's dtype) or
``{"inputs": {"image": {"data": <nested or flat list>, "dtype": "float32", "shape": [2, 3, 32, 32]}}}``
(the dtype as sent: a wrong one is refused by the session). JSON reply:
``{"outputs": {"probs": {"dtype": "float32", "shape": [2, 10], "data": <nested list>}}}``.
NumPy: a request body written by ``numpy.savez`` (``Content-Type: application/x-npz``) gets an
``.npz`` reply that loads without pickling: strings as unicode arrays, an output that is no tensor
(a sequence of maps) as its JSON text under ``NAME.json``. Errors: ``{"error": "<one line>"}`` with HTTP 400."""
from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trt_backend.errors import MemoryLimitError, RequestError
from trt_backend.profiles.node_arg import NodeArg
from trt_backend.ort.values import check_npz_sizes
from trt_backend.session.feeds import storable, values_as

NPZ = "application/x-npz"
JSON = "application/json"


def is_npz(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() in (NPZ, "application/octet-stream")


def decode_request(body: bytes, content_type: str | None, inputs: Sequence[NodeArg]) -> dict[str, np.ndarray]:
    """Feeds from an HTTP body; :class:`RequestError` naming what cannot be read."""
    if is_npz(content_type):
        if body[:6] == b"\x93NUMPY":
            raise RequestError("the request body is a single .npy array, which names no input; send an .npz of "
                               "arrays by input name (numpy.savez)")
        if not body.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # (a zip archive's first bytes; an empty one's)
            raise RequestError("the request body is not an .npz (a zip archive of arrays by input name, as "
                               "numpy.savez writes); send one, or JSON with Content-Type application/json")
        try:
            with np.load(io.BytesIO(body), allow_pickle=False) as data:
                check_npz_sizes(data, "the request body")  # (a header can claim any shape: before numpy allocates)
                return {k: data[k] for k in data.files}
        except MemoryLimitError as e:
            raise RequestError(str(e)) from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise RequestError(f"cannot read the request body as .npz: {e}") from None
    try:
        doc = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"cannot read the request body as JSON: {e}") from None
    except RecursionError:
        raise RequestError("cannot read the request body as JSON: it nests deeper than a reader follows") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
        raise RequestError('a JSON request is {"inputs": {"<input name>": <array>, ...}}')
    dtypes = {a.name: a.dtype for a in inputs}
    return {name: _array(name, value, dtypes.get(name)) for name, value in doc["inputs"].items()}


def _array(name: str, value: Any, model_dtype: np.dtype | None) -> np.ndarray:
    if isinstance(value, dict):
        if "data" not in value:
            raise RequestError(f"input '{name}': an object needs \"data\" (and may give \"dtype\", \"shape\")")
        try:
            dtype = np.dtype(value.get("dtype") or model_dtype or "float32")
        except TypeError:
            raise RequestError(f"input '{name}': unknown dtype {value.get('dtype')!r}") from None
        arr = _as_array(name, value["data"], dtype)
        if "shape" in value:
            shape = value["shape"]
            if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
                raise RequestError(f"input '{name}': shape must be a list of whole numbers, got {shape!r}")
            if int(np.prod(shape, dtype=np.int64)) != arr.size:
                raise RequestError(f"input '{name}': {arr.size} values do not fill shape {tuple(shape)}")
            arr = arr.reshape(shape)
        return arr
    return _as_array(name, value, model_dtype if model_dtype is not None else np.dtype("float32"))


def _as_array(name: str, data: Any, dtype: np.dtype) -> np.ndarray:
    """JSON values as an array of ``dtype``, refusing what the conversion would change
    (:func:`trt_backend.session.feeds.values_as`, as Session.run reads lists)."""
    array, problem = values_as(data, dtype)
    if array is None:
        raise RequestError(f"input '{name}': {problem}")
    return array


def encode_reply(outputs: Mapping[str, np.ndarray], npz: bool) -> bytes:
    if npz:
        buffer = io.BytesIO()
        np.savez(buffer, **dict(_npz_entry(n, v) for n, v in outputs.items()))  # type: ignore[arg-type]
        return buffer.getvalue()
    return json.dumps({"outputs": {n: {"dtype": np.asarray(v).dtype.name, "shape": list(np.shape(v)),
                                       "data": _json_data(np.asarray(v))} for n, v in outputs.items()}},
                      allow_nan=False).encode()


def _json_data(value: np.ndarray) -> Any:
    """An output's values as JSON holds them: NaN and infinities as the strings "NaN",
    "Infinity", "-Infinity" (JSON has no such numbers; Python's writer would emit bare NaN and
    Infinity, which strict readers refuse), which numpy reads back with the dtype given."""
    if value.dtype.kind not in "fc" or np.isfinite(value).all():
        return value.tolist()
    words = np.where(np.isnan(value), "NaN", np.where(value > 0, "Infinity", "-Infinity"))
    return np.where(np.isfinite(value), value.astype(object), words.astype(object)).tolist()


def _npz_entry(name: str, value: Any) -> tuple[str, np.ndarray]:
    """An output as an .npz reply holds it without pickling (a client reads it with numpy's
    ``allow_pickle=False``): a tensor as it is, strings as a unicode array, and what is no tensor
    (a sequence of maps: scikit-learn's ZipMap) as its JSON text under ``NAME.json``, as the JSON
    reply gives its data."""
    stored = storable(value)  # (as run --outputs and compare --save-outputs store it)
    if stored is not None:
        return name, stored
    data = value.tolist() if isinstance(value, np.ndarray) else value
    return f"{name}.json", np.array(json.dumps(data, default=lambda x: x.tolist() if hasattr(x, "tolist") else str(x)))


def encode_error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


# ------------------------------------------------------------ client side (tests, benchmark, users)

def json_request(feeds: Mapping[str, np.ndarray]) -> bytes:
    """A JSON request body that keeps each array's dtype and shape."""
    return json.dumps({"inputs": {n: {"dtype": np.asarray(v).dtype.name, "shape": list(np.shape(v)),
                                      "data": np.asarray(v).reshape(-1).tolist()} for n, v in feeds.items()}}).encode()


def npz_request(feeds: Mapping[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **{n: np.asarray(v) for n, v in feeds.items()})  # type: ignore[arg-type]
    return buffer.getvalue()


def read_reply(body: bytes, content_type: str | None) -> dict[str, np.ndarray]:
    """The outputs of a reply body (JSON or .npz)."""
    if is_npz(content_type):
        with np.load(io.BytesIO(body), allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    doc = json.loads(body)
    return {n: np.asarray(v["data"], dtype=v["dtype"]).reshape(v["shape"]) for n, v in doc["outputs"].items()}
