"""ONNX Runtime sessions that follow the process's thread-pool mode.

ONNX Runtime gives each session its own intra-op pool unless the process has switched to its
global pools (``set_global_thread_pool_sizes``); after that switch every new session must say
``use_per_session_threads = False`` or ONNX Runtime refuses it, and before it no session may say
so. Everything here that makes an ONNX Runtime session goes through :func:`inference_session`,
which sets the flag to match, so our own sessions (segments, calibration, references,
baselines, probes) keep working whichever mode the process is in, whoever switched it.

Nothing here imports onnxruntime at load.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from partitioner.errors import OptionsError
from partitioner.options_check import number_option

log = logging.getLogger(__name__)

_lock = threading.Lock()
# (intra, inter) once this process uses ONNX Runtime's global pools; None: per-session pools
# as far as we know (somebody else may still switch; inference_session notices).
_global_sizes: tuple[int, int] | None = None
_GLOBAL_REFUSAL = "global thread pool"  # in ONNX Runtime's refusal of a per-session-pool session
_UNKNOWN = (-1, -1)  # global pools created outside trt_backend: their sizes are not known here


def global_thread_pool() -> tuple[int, int] | None:
    """(intra-op threads, inter-op threads) of ONNX Runtime's global pools if this process uses
    them (0: ONNX Runtime's default; -1: set outside trt_backend, unknown), else None."""
    return _global_sizes


def thread_pool_mode() -> str:
    """"global" when this process's ONNX Runtime sessions share its global pool, else "session"."""
    return "global" if _global_sizes is not None else "session"


def use_global_thread_pool(intra_op_threads: int = 0, inter_op_threads: int = 0) -> None:
    """Switch this process to ONNX Runtime's global thread pools, once: every ONNX Runtime
    session made afterwards shares one intra-op pool instead of starting its own. With many
    segment sessions taking turns this saves the wake-up of a sleeping pool per segment run.

    Process-wide and final: sessions created afterwards by other code must set
    ``use_per_session_threads = False`` (ONNX Runtime refuses them otherwise). Calling it again
    with the same sizes does nothing; with other sizes raises OptionsError (the pools exist).
    """
    global _global_sizes
    for name, v in (("intra_op_threads", intra_op_threads), ("inter_op_threads", inter_op_threads)):
        number_option(v, name, whole=True, low=0)
    want = (intra_op_threads, inter_op_threads)
    switched = False
    with _lock:
        if _global_sizes is None:
            from onnxruntime.capi import onnxruntime_pybind11_state as state

            try:
                state.set_global_thread_pool_sizes(intra_op_threads, inter_op_threads)
                _global_sizes, switched = want, True
            except Exception as e:  # ORT's Fail: "Global thread pools have already been created"
                if "already been created" not in str(e):
                    raise
                _global_sizes = _UNKNOWN  # created outside trt_backend, sizes not known to us
        if _global_sizes != want and want != (0, 0):
            held = "sizes set outside trt_backend" if _global_sizes == _UNKNOWN else _describe(_global_sizes)
            raise OptionsError(f"ONNX Runtime's global thread pool of this process already exists ({held}); "
                               f"it cannot be resized to {_describe(want)} (leave the thread counts at 0 to share "
                               "it as it is)")
    if switched:
        log.info("ONNX Runtime's global thread pool is on for this process (%s): sessions other code creates "
                 "here must set use_per_session_threads=False", _describe(want))


def _describe(sizes: tuple[int, int]) -> str:
    return ", ".join(f"{n or 'default'} {what} threads" for n, what in zip(sizes, ("intra-op", "inter-op")))


def inference_session(data: bytes | str, sess_options: Any = None, providers: Any = ("CPUExecutionProvider",),
                      disabled_optimizers: Sequence[str] = ()) -> Any:
    """``onnxruntime.InferenceSession(data, sess_options, providers, disabled_optimizers=...)`` with
    ``use_per_session_threads`` matching the process's pools. Under global pools the options'
    own thread counts are set to 0: the global pool's sizes apply, as ONNX Runtime has it."""
    global _global_sizes
    import onnxruntime as ort

    so = sess_options if sess_options is not None else ort.SessionOptions()
    extra = {"disabled_optimizers": list(disabled_optimizers)} if disabled_optimizers else {}
    if _global_sizes is not None:
        _share_global(so)
    try:
        return ort.InferenceSession(data, sess_options=so, providers=list(providers), **extra)
    except Exception as e:  # only ONNX Runtime's global-pool refusal is handled here
        if not so.use_per_session_threads or _GLOBAL_REFUSAL not in str(e):
            raise
    # Somebody switched the process to global pools behind our back: follow, and remember.
    # ONNX Runtime has printed its provider-fallback banner for the refused attempt by now,
    # once per process, as the switch is remembered.
    with _lock:
        if _global_sizes is None:
            _global_sizes = _UNKNOWN
    log.info("this process uses ONNX Runtime's global thread pool (switched outside trt_backend); following it")
    _share_global(so)
    return ort.InferenceSession(data, sess_options=so, providers=list(providers), **extra)


def _share_global(so: Any) -> None:
    """Make ``so`` use the global pools; its own thread counts are cleared (ONNX Runtime would
    ignore them, with a warning per session)."""
    so.use_per_session_threads = False
    so.intra_op_num_threads = 0
    so.inter_op_num_threads = 0
