"""What a Session is (:class:`SessionOptions`) and what one run does (:class:`RunOptions`).

A SessionOptions is composed of the options of the stages it drives, each validating itself:
``partition`` (:class:`partitioner.PartitionOptions`: how the model is cut), ``ort``
(:class:`~trt_backend.ort.options.OrtOptions`: every ONNX Runtime session it makes) and
``build`` (:class:`~trt_backend.engines.builder.BuildOptions`: how engines are built), plus the
few settings that are the session's own. As with ONNX Runtime's ``SessionOptions``, the stages'
fields may also be given flat (``SessionOptions(exclude_ops=("Resize",), intra_op_threads=2)``):
each goes to the one stage that has a field of that name."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields, replace
from typing import Any

from partitioner import PartitionOptions
from partitioner.capability import CapabilityOracle
from partitioner.errors import OptionsError
from partitioner.options_check import keyword_checked, number_option
from trt_backend.engines.builder import BuildOptions
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sizes import parse_size
from trt_backend.planning import with_shipped_plugins

EMULATE_CHOICES = (True, False, "auto")
FLAVOR_CHOICES = ("auto", "tensorrt", "tensorrt_rtx", "none")

# Flat keyword -> the stage option it belongs to (one stage per name: the names do not overlap).
_STAGES: dict[str, type] = {"partition": PartitionOptions, "ort": OrtOptions, "build": BuildOptions}
_FLAT = {f.name: stage for stage, cls in _STAGES.items() for f in fields(cls) if f.name != "spin_while_running"}
RENAMED_OPTIONS = {"optimization_level": "graph_optimization_level (ONNX Runtime's level: disable|basic|extended|all) "
                                  "or builder_optimization_level (TensorRT's builder level 0..5)"}


@dataclass(frozen=True, init=False)
class SessionOptions:
    """How a :class:`~trt_backend.session.session.Session` plans, derives profiles and runs.

    ``emulate``: True runs TensorRT segments through ONNX Runtime on CPU; False requires
    TensorRT; "auto" emulates only when TensorRT cannot execute here (one warning).
    ``flavor``: whose TensorRT parser decides capability ("none": everything on ONNX Runtime).
    ``oracle``: a ``partitioner.CapabilityOracle`` to ask instead of a TensorRT parser.
    ``isolate_parser``: ask the TensorRT parser in a child process (survives its crashes).
    ``cache_dir``: cache folder of engines and, for a model given by its file, of plans (the
    plan, learned types and derived profiles: :mod:`trt_backend.artifacts.plan_cache`) (None: no
    cache; on a GPU, TensorRT-RTX's runtime caches go to its ``runtime`` folder).
    ``allow_host_code``: load engines that carry host code (version-compatible builds with their
    lean runtime). ``lean_runtime``: the lean runtime library (``libnvinfer_lean``) of the
    TensorRT that built version-compatible engines without one, to run them on a later TensorRT.
    ``outputs_on_device``: GPU path, return outputs as device arrays
    (``__cuda_array_interface__``) unless a run says otherwise.
    ``calibration_seed``: seed of the random inputs profiles are calibrated with.
    ``max_memory``: bytes (or ``"8G"``, ``"512M"``) no single tensor the session makes (random
    inputs, calibration data, host copies of outputs) may exceed, besides what the machine has
    available. ``sign_key``: a build folder must be signed with this key (the key, ``@FILE`` or
    bytes; None: ``TRT_BACKEND_SIGN_KEY`` when set, else a signature is not required).
    ``device_id``: the GPU everything of the session lives on (engines, streams, buffers, the
    CUDA-EP sessions, outputs), made current in every thread that runs the session; a GPU that
    does not exist is a ``DeviceError``. None: the calling thread's current device (GPU 0 unless
    changed). An emulated session (``emulate=True``) touches no GPU and ignores it; with
    "auto" on a machine without a GPU, setting it is an error (a GPU was asked for).
    ``weights_by_reference``: a build folder (:func:`trt_backend.build`) refers to the model
    file's weights where they are (its external data files, and weights held inside the .onnx
    by their offsets in it) instead of copying them in; it then loads only while those files
    are unchanged where they were. Only building reads it."""

    partition: PartitionOptions = field(default_factory=PartitionOptions)
    ort: OrtOptions = field(default_factory=OrtOptions)
    build: BuildOptions = field(default_factory=BuildOptions)
    emulate: bool | str = "auto"
    flavor: str = "auto"
    oracle: CapabilityOracle | None = None
    isolate_parser: bool = False
    cache_dir: str | None = None
    allow_host_code: bool = False
    outputs_on_device: bool = False
    calibration_seed: int = 0
    max_memory: int | None = None
    sign_key: str | bytes | None = field(default=None, repr=False)
    device_id: int | None = None
    lean_runtime: str | None = None
    weights_by_reference: bool = False
    # the stages' fields given by keyword (``SessionOptions(precision="fp32")``), at their defaults
    # too: a build folder of another precision refuses such a one. A field, so that
    # ``dataclasses.replace`` keeps it; not compared: it says how the options were written.
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __init__(self, *, partition: PartitionOptions | None = None, ort: OrtOptions | None = None,
                 build: BuildOptions | None = None, emulate: bool | str = "auto", flavor: str = "auto",
                 oracle: CapabilityOracle | None = None, isolate_parser: bool = False, cache_dir: str | None = None,
                 allow_host_code: bool = False, outputs_on_device: bool = False, calibration_seed: int = 0,
                 max_memory: int | str | None = None, sign_key: str | bytes | None = None,
                 device_id: int | None = None, lean_runtime: str | None = None, weights_by_reference: bool = False,
                 given: frozenset[str] = frozenset(), **flat: Any) -> None:
        stages: dict[str, Any] = {"partition": partition if partition is not None else PartitionOptions(),
                                  "ort": ort if ort is not None else OrtOptions(),
                                  "build": build if build is not None else BuildOptions()}
        for name, cls in _STAGES.items():
            if not isinstance(stages[name], cls):
                raise OptionsError(f"{name} must be a {cls.__name__}, got {type(stages[name]).__name__}")
        by_stage: dict[str, dict[str, Any]] = {}
        for key, value in flat.items():
            if key in RENAMED_OPTIONS:
                raise OptionsError(f"SessionOptions has no option '{key}': say {RENAMED_OPTIONS[key]}")
            if key not in _FLAT:
                raise OptionsError(f"SessionOptions has no option '{key}' (its own: {', '.join(_OWN)}; "
                                   f"or a field of PartitionOptions, OrtOptions or BuildOptions)")
            by_stage.setdefault(_FLAT[key], {})[key] = value
        for name, changes in by_stage.items():
            try:
                stages[name] = replace(stages[name], **changes)
            except TypeError as e:  # a value the stage's own checks could not even look at
                raise OptionsError(f"{name} options: {e}") from None
        own = {"emulate": emulate, "flavor": flavor, "oracle": oracle, "isolate_parser": isolate_parser,
               "cache_dir": cache_dir, "allow_host_code": allow_host_code, "outputs_on_device": outputs_on_device,
               "calibration_seed": calibration_seed, "max_memory": parse_size(max_memory, "max_memory"),
               "sign_key": sign_key, "device_id": device_id, "lean_runtime": lean_runtime,
               "weights_by_reference": weights_by_reference}
        stages["partition"] = with_shipped_plugins(stages["partition"])  # (as every door resolves them)
        for key, value in {**stages, **own}.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "given", frozenset(given) | frozenset(flat))
        if not any(emulate is c or (isinstance(c, str) and emulate == c) for c in EMULATE_CHOICES):
            raise OptionsError(f"emulate must be True, False or 'auto', got {emulate!r}")
        if flavor not in FLAVOR_CHOICES:
            raise OptionsError(f"flavor must be one of {', '.join(FLAVOR_CHOICES)}, got {flavor!r}")
        number_option(calibration_seed, "calibration_seed", whole=True)
        if sign_key is not None and not isinstance(sign_key, (str, bytes)):
            raise OptionsError(f"sign_key must be text, @FILE or bytes, got {type(sign_key).__name__}")
        if device_id is not None:
            number_option(device_id, "device_id (a GPU index, or None)", whole=True, low=0)
        if not isinstance(weights_by_reference, bool):
            raise OptionsError(f"weights_by_reference must be True or False, got {weights_by_reference!r}")
        if lean_runtime is not None and not isinstance(lean_runtime, str):
            raise OptionsError(f"lean_runtime must be the path of a lean runtime library, got {lean_runtime!r}")

    def ort_for(self, segments: int) -> OrtOptions:
        """ONNX Runtime settings of each session of a plan of ``segments`` segments."""
        return self.ort.for_segments(segments)


_OWN = tuple(f.name for f in dataclasses.fields(SessionOptions) if f.name != "given")
# every keyword SessionOptions(...) takes: its own fields and the stages' fields, flat
OPTION_NAMES = frozenset(_OWN) | frozenset(_FLAT)


def is_ort_run_options(value: Any) -> bool:
    """Whether ``value`` is an ``onnxruntime.RunOptions`` (told without importing onnxruntime)."""
    cls = type(value)
    return cls.__name__ == "RunOptions" and cls.__module__.startswith("onnxruntime")


@keyword_checked
@dataclass(frozen=True)
class RunOptions:
    """What one :meth:`Session.run` does. ``outputs_on_device``: None follows the session's
    option. ``ort``: an ``onnxruntime.RunOptions`` handed to every ONNX Runtime segment run of
    this call (log level, run tag, ``terminate`` to stop a run from another thread)."""

    outputs_on_device: bool | None = None
    ort: Any = None

    def __post_init__(self) -> None:
        if self.outputs_on_device not in (None, True, False):
            raise OptionsError(f"outputs_on_device must be None, True or False, got {self.outputs_on_device!r}")
        if self.ort is not None and not is_ort_run_options(self.ort):
            raise OptionsError(f"RunOptions.ort must be an onnxruntime.RunOptions, got {type(self.ort).__name__}")
