"""ONNX Runtime settings of a Session's sessions (segments, calibration, references, baselines)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from partitioner.errors import OptionsError
from partitioner.options_check import keyword_checked, names_option, number_option

GRAPH_OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
THREAD_POOLS = ("session", "global")


@keyword_checked
@dataclass(frozen=True)
class OrtOptions:
    """ONNX Runtime settings shared by every ONNX Runtime session of a Session.

    ``allow_spinning``: pool threads spin waiting for work. None: they spin while their session
    runs, and with several segments stop when its run returns (idle pools spinning would take
    cores from the segment running); True: ONNX Runtime's default (they spin on after a run);
    False: they sleep at once (each parallel op then wakes them: slow).
    ``share_arena``: segment sessions allocate from one CPU arena (registered process-wide, once,
    with ``onnxruntime.create_and_register_allocator``, which replaces one registered before):
    what a segment frees is reused, still in cache, by the next.
    ``thread_pool``: "session" gives each ONNX Runtime session (one per segment) its own
    intra-op pool, ONNX Runtime's default; "global" makes them all share ONNX Runtime's
    process-wide pool (sized by the thread counts, once per process): no sleeping pool to wake
    per segment, but the whole process switches (:func:`trt_backend.ort.threads.use_global_thread_pool`)
    from the first Session that asks and gets past checking its model and profiles.
    ``allow_spinning`` is for per-session pools (False is refused with "global").
    ``disabled_optimizers``: ONNX Runtime graph optimizers switched off by name. By default its
    ``ReshapeFusion``, which rewrites a Reshape's computed target (Shape -> Gather -> Concat) into a
    constant with ``0`` and ``-1`` entries: on an empty tensor (a detector where no box survives)
    the ``-1`` cannot be inferred and the Reshape fails, although the computed target, e.g.
    ``[0, 4]``, is fine (RetinaNet and FCOS from torchvision, once intermediate tensors are
    outputs). A run that fails with some optimizers off runs again on a session with ONNX Runtime's
    full set, kept from then on (:class:`~trt_backend.ort.sessions.FullSetOnFailure`: ONNX Runtime
    fails a ViT's cubic Resize with ReshapeFusion off). ``()`` keeps ONNX Runtime's full set."""

    intra_op_threads: int = 0  # 0: ONNX Runtime's default
    inter_op_threads: int = 0
    graph_optimization_level: str = "all"  # disable | basic | extended | all
    custom_op_libraries: tuple[str, ...] = ()  # e.g. onnxruntime_extensions.get_library_path()
    providers: tuple[str | tuple[str, dict[str, str]], ...] = ("CPUExecutionProvider",)  # names or (name, options)
    log_severity: int = 3  # 0 verbose .. 4 fatal
    allow_spinning: bool | None = None
    share_arena: bool = False
    thread_pool: str = "session"
    disabled_optimizers: tuple[str, ...] = ("ReshapeFusion",)
    # Set by :meth:`for_segments`, not by users: spin while a run is in progress, stop when it
    # returns ("session.force_spinning_stop"), where allow_spinning is False.
    spin_while_running: bool = False

    def __post_init__(self) -> None:
        for f in ("custom_op_libraries", "providers", "disabled_optimizers"):
            value = getattr(self, f)
            if f == "providers":  # (a name, or ONNX Runtime's (name, {option: value}) pair)
                entries = (value,) if isinstance(value, str) else value
                if not isinstance(entries, (list, tuple)) or not all(
                        isinstance(e, str) or (isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], str)
                                               and isinstance(e[1], Mapping)) for e in entries):
                    raise OptionsError(f"providers must be a list of provider names, or of (name, options dict) "
                                       f"pairs, got {value!r:.80}")
                object.__setattr__(self, f, tuple(entries))
            else:
                object.__setattr__(self, f, names_option(value, f))
        if self.graph_optimization_level not in GRAPH_OPTIMIZATION_LEVELS:
            raise OptionsError(f"graph_optimization_level must be one of {', '.join(GRAPH_OPTIMIZATION_LEVELS)}, "
                               f"got {self.graph_optimization_level!r}")
        if self.thread_pool not in THREAD_POOLS:
            raise OptionsError(f"thread_pool must be one of {', '.join(THREAD_POOLS)}, got {self.thread_pool!r}")
        if self.thread_pool == "global" and self.allow_spinning is False:
            raise OptionsError("allow_spinning=False applies to per-session thread pools; ONNX Runtime's global pool "
                               "spins as it was created (use thread_pool='session' to stop spinning)")
        for f in ("intra_op_threads", "inter_op_threads"):
            number_option(getattr(self, f), f, whole=True, low=0)
        if self.allow_spinning not in (None, True, False):
            raise OptionsError(f"allow_spinning must be None, True or False, got {self.allow_spinning!r}")

    @property
    def shares_global_pool(self) -> bool:
        return self.thread_pool == "global"

    def for_segments(self, segments: int) -> OrtOptions:
        """These settings as each session of a plan of ``segments`` segments gets them: the
        spinning choice made (None: spin on with one session, only while running with several)."""
        if self.shares_global_pool:  # the global pool spins as the process created it
            return replace(self, allow_spinning=True, spin_while_running=False)
        if self.allow_spinning is None:
            return replace(self, allow_spinning=segments <= 1, spin_while_running=True)
        return replace(self, spin_while_running=False)
