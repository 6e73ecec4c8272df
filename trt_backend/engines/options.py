"""Build options (:class:`BuildOptions`) and the names they are checked against, loaded without
onnx, numpy or TensorRT: a build's options are made, and its head start's engine configured with
them (:mod:`trt_backend.engines.head_start`), before those load."""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from partitioner.errors import OptionsError
from partitioner.options_check import keyword_checked, names_option, number_option
from trt_backend._lazy import lazy_module
from trt_backend.engines.precision_plan import PrecisionPlan, read_precision_plan
from trt_backend.errors import CalibrationDataError
from trt_backend.ort.sizes import parse_size

_calibration = lazy_module("trt_backend.engines.calibration")  # the calibration data's digest, for keys
_onnx_defs = lazy_module("onnx.defs")  # (an op type kept in fp32 that is not one of the defaults: checked)

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "auto")  # int8: Q/DQ (engines/quantize.py); auto: a search
TRANSFORM_VERSION = 4  # part of engine cache keys: bump when the transform's output changes (4: fp16 epsilons)

# Normalisations, softmaxes and accumulating reductions lose accuracy in 16 bits. BatchNormalization
# is left out on purpose: at inference it is a per-channel affine op that TensorRT folds into the
# preceding convolution, and casts around it would prevent that.
DEFAULT_KEEP_FP32 = ("LayerNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization",
                     "MeanVarianceNormalization", "RMSNormalization", "Softmax", "LogSoftmax", "ReduceMean",
                     "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                     "ReduceProd")
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
QUANTIZER_VERSION = 3  # part of engine cache keys: bump when the Q/DQ placement changes (3: one scale dtype per op)
HARDWARE_LEVELS = ("none", "ampere_plus", "same_compute_capability")


def validate_precision(precision: str, keep_fp32_ops: Iterable[str] = ()) -> None:
    if precision not in PRECISIONS:
        raise OptionsError(f"unknown precision '{precision}'; choose one of {', '.join(PRECISIONS)}")
    for op in keep_fp32_ops:
        if not isinstance(op, str) or not op:
            raise OptionsError(f"keep-fp32 op types must be non-empty strings, got {op!r}")
        if op not in DEFAULT_KEEP_FP32 and not _onnx_defs.has(op):  # (only ONNX's own ops are ever reduced)
            alike = [s.name for s in _onnx_defs.get_all_schemas() if s.name.lower() == op.lower() and not s.domain]
            raise OptionsError(f"unknown op type '{op}' kept in fp32: not an ONNX operator"
                               + (f" (did you mean '{alike[0]}'?)" if alike else "")
                               + "; the list replaces the default one, so a name that matches nothing keeps nothing")


def require_calibration(precision: str, data: str | None) -> None:
    if precision == "int8" and not data:
        raise CalibrationDataError("int8 needs calibration data: give --calibration-data FILE.npz|DIR (one array per "
                                   "model input, samples stacked on the batch dim), or 'random' for a smoke test "
                                   "(random data is not a calibration)")


@keyword_checked
@dataclass(frozen=True)
class BuildOptions:
    """How engines are built. Profiles are not here: they are per segment, passed beside.

    ``compute_capabilities`` (TensorRT-RTX AOT builds): names such as ``"SM80"``/``"sm_86"``/
    ``"8.9"`` or ``"current"``; empty keeps the flavor's default. Engines built with
    ``version_compatible`` and ``exclude_lean_runtime=False`` embed host code."""

    precision: str = "fp32"  # fp32 | tf32 | fp16 | bf16 | int8
    keep_fp32_ops: tuple[str, ...] = DEFAULT_KEEP_FP32
    calibration_data: str | None = None  # int8: FILE.npz | a folder of them | "random" (a smoke test)
    calibration_method: str = "minmax"  # int8: minmax | entropy | percentile
    # auto: what the search found (accuracy.auto_precision); a plan file, a build folder made with
    # auto or the plan's JSON are read into one
    precision_plan: PrecisionPlan | None = None
    workspace_bytes: int | None = None
    builder_optimization_level: int | None = None  # TensorRT builder optimisation level, 0..5
    timing_cache: str | None = None  # file: loaded, merged, saved (no-op in TensorRT-RTX)
    hardware_compatibility: str = "none"  # none | ampere_plus | same_compute_capability
    compute_capabilities: tuple[str, ...] = ()
    max_aux_streams: int | None = None
    version_compatible: bool = False
    exclude_lean_runtime: bool = True
    max_workers: int = 0  # parallel segment builds; 0: min(4, CPU count)
    # trial builds a build may spend narrowing down a segment TensorRT's builder refuses without
    # naming a node (engines.fallback); 0: such a segment goes to ONNX Runtime whole
    max_narrowing_builds: int = 32
    # bytes (or "4G") the builds may hold: larger TensorRT segments are cut (see engines.memory);
    # None: the memory available when the builds start
    max_build_memory: int | None = None

    def __post_init__(self) -> None:
        keep = names_option(self.keep_fp32_ops, "keep_fp32_ops", item="op types (str)")
        validate_precision(self.precision, keep)
        object.__setattr__(self, "keep_fp32_ops", keep)
        if self.calibration_method not in CALIBRATION_METHODS:
            raise OptionsError(f"calibration method must be one of {', '.join(CALIBRATION_METHODS)}, "
                               f"got {self.calibration_method!r}")
        if self.calibration_data is not None:
            if not isinstance(self.calibration_data, (str, os.PathLike)):
                raise OptionsError(f"calibration_data must be a path (an .npz, a folder of them) or 'random', got "
                                   f"{type(self.calibration_data).__name__}")
            object.__setattr__(self, "calibration_data", os.fspath(self.calibration_data))
        require_calibration(self.precision, self.calibration_data)
        plan: Any = self.precision_plan
        if isinstance(plan, (str, os.PathLike, Mapping)):  # as --precision-plan takes it: a file, a folder, its JSON
            object.__setattr__(self, "precision_plan", read_precision_plan(plan))
        if self.precision == "auto" and not isinstance(self.precision_plan, PrecisionPlan):
            raise OptionsError("precision 'auto' builds from a precision plan: search one (trt-backend build "
                               "--precision auto; in Python trt_backend.search_precision(model, ...)), or give one "
                               "(--precision-plan; BuildOptions(precision_plan=...)): a plan JSON or a build folder "
                               "made with auto")
        if self.precision_plan is not None and self.precision != "auto":
            raise OptionsError(f"a precision plan applies to precision 'auto', not {self.precision!r}")
        if self.precision == "auto" and self.precision_plan is not None and not self.calibration_data and any(
                s.precision == "int8" for s in self.precision_plan.segments):
            require_calibration("int8", None)
        ccs = self.compute_capabilities
        if isinstance(ccs, (str, int, float)) and not isinstance(ccs, bool):
            ccs = (ccs,)
        if not isinstance(ccs, (list, tuple)):
            raise OptionsError(f"compute_capabilities must be a list such as ['8.6', '8.9'], got {type(ccs).__name__}")
        object.__setattr__(self, "compute_capabilities", tuple(_cc_name(c) for c in ccs))
        for name in ("workspace_bytes", "max_aux_streams"):
            if getattr(self, name) is not None:
                number_option(getattr(self, name), name, whole=True, low=0)
        if self.builder_optimization_level is not None:
            number_option(self.builder_optimization_level, "builder optimisation level", whole=True, low=0, high=5)
        if self.hardware_compatibility not in HARDWARE_LEVELS:
            raise OptionsError(f"hardware compatibility must be one of {', '.join(HARDWARE_LEVELS)}, "
                               f"got {self.hardware_compatibility!r}")
        number_option(self.max_workers, "max_workers", whole=True, low=0)
        number_option(self.max_narrowing_builds, "max_narrowing_builds", whole=True, low=0)
        object.__setattr__(self, "max_build_memory", parse_size(self.max_build_memory, "max_build_memory"))

    @property
    def host_code(self) -> bool:
        return self.version_compatible and not self.exclude_lean_runtime

    def workers(self) -> int:
        return self.max_workers or min(4, os.cpu_count() or 1)

    def key_fields(self) -> dict[str, Any]:
        """What changes the engine (cache key part): everything but file paths, parallelism and
        the memory budget (which changes how a model is cut, not a given segment's engine)."""
        # (under the key written before the field was renamed, in its place: engine caches and
        # build manifests keep theirs)
        d = {("optimization_level" if k == "builder_optimization_level" else k): v for k, v in asdict(self).items()}
        for k in ("timing_cache", "max_workers", "calibration_data", "calibration_method", "precision_plan",
                  "max_narrowing_builds", "max_build_memory"):
            d.pop(k)
        if self.precision_plan is not None:  # What the plan decides; its search log is not part of the key.
            d["precision_plan"] = {"segments": self.precision_plan.to_dict()["segments"]}
        d["keep_fp32_ops"] = sorted(d["keep_fp32_ops"]) if self.precision in ("fp16", "bf16", "int8", "auto") else []
        d["precision_transform"] = TRANSFORM_VERSION
        if self.calibration_data and self.precision in ("int8", "auto"):  # the data by its bytes, not its path
            d["calibration"] = {"sha256": _calibration.data_sha256(str(self.calibration_data)),
                                "method": self.calibration_method, "quantizer": QUANTIZER_VERSION}
        return d


def _cc_name(value: str) -> str:
    text = str(value).strip().upper().replace("_", "").replace(".", "")
    if text == "CURRENT":
        return text
    digits = text[2:] if text.startswith("SM") else text
    if not digits.isdigit() or len(digits) not in (2, 3):
        raise OptionsError(f"compute capability {value!r} not understood; write e.g. SM80, sm_86, 8.9 or current")
    return "SM" + digits
