"""trt-backend: TensorRT engines for what TensorRT runs, ONNX Runtime for the rest, one session.

The public surface, all of it here (each subpackage has its own small facade with ``__all__``):

- :class:`Session`, :class:`SessionOptions`, :class:`RunOptions`: run a model or a build folder.
- :class:`BuildOptions`, :class:`PartitionOptions`, :class:`OrtOptions`: the stages' options a
  SessionOptions is made of (or give their fields flat: ``SessionOptions(precision="fp16")``).
- :func:`compile`: plan, derive profiles, apply the precision, build: what every door goes through.
- :func:`build` (a build folder), :func:`load` (a Session from one).
- :func:`compare` (:class:`CompareOptions`), :func:`run_bench` (:class:`BenchOptions`),
  :func:`search_precision`, :func:`make_plan`.
- :mod:`errors`: every exception a user can catch, all under ``errors.TrtBackendError``.

Heavy modules (TensorRT, ONNX Runtime, CUDA) load on first use, not at import."""
from __future__ import annotations

from trt_backend import errors
from trt_backend._lazy import facade
from trt_backend._version import __version__

# public name -> module holding it (imported on first use)
_PUBLIC = {
    "Session": "trt_backend.session.session",
    "SessionOptions": "trt_backend.session.options",
    "RunOptions": "trt_backend.session.options",
    "BuildOptions": "trt_backend.engines.options",
    "PartitionOptions": "partitioner",
    "OrtOptions": "trt_backend.ort.options",
    "compile": "trt_backend.compiler",
    "build": "trt_backend.artifacts.write",
    "load": "trt_backend.session.session",
    "compare": "trt_backend.accuracy.compare",
    "CompareOptions": "trt_backend.accuracy.options",
    "run_bench": "trt_backend.bench.loop",
    "BenchOptions": "trt_backend.bench.loop",
    "search_precision": "trt_backend.accuracy.auto_precision",
    "make_plan": "trt_backend.planning",
}
__getattr__, _dir, _names = facade(__name__, _PUBLIC)
__all__ = ["__version__", "errors", *_names]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
