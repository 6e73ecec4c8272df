"""ONNX Runtime settings of a Session's sessions."""
from __future__ import annotations

from dataclasses import dataclass

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")

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
