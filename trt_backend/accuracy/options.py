"""What an accuracy comparison checks and how: tolerances (global and per output), the error
statistic, the inputs it generates, the precision of the TensorRT segments, and localisation.

Only onnx and numpy here; Polygraphy and ONNX Runtime load when a comparison runs."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from partitioner.errors import OptionsError
from partitioner.options_check import keyword_checked, plain_options, names_option, number_option
from trt_backend.accuracy.tasks import TaskCheck

ERROR_STATS = ("elemwise", "max", "mean", "median", "quantile")
LOCALIZE_CHOICES = ("off", "mismatch", "always")
DEFAULT_TOLERANCE = 1e-3  # the seeds' "1e-3 absolute and relative"
AUTO_PRECISIONS = ("int8", "bf16", "fp16")  # what --precision auto may choose, lowest first


def tolerance_value(value: Any, what: str) -> float:
    """A finite, non-negative float from a number or text; OptionsError otherwise."""
    return number_option(value, what, low=0.0, text=True)


def parse_tolerance(text: str) -> tuple[str, float, float]:
    """``"out_name:1e-2,1e-3"`` -> ("out_name", 0.01, 0.001). The name may itself hold colons
    (the last one separates it)."""
    name, sep, values = str(text).rpartition(":")
    parts = values.split(",")
    if not sep or not name.strip() or len(parts) != 2:
        raise OptionsError(f"cannot read tolerance {text!r}; write OUTPUT_NAME:ATOL,RTOL, e.g. logits:1e-2,1e-3")
    where = f"tolerance {text!r}"
    return name.strip(), tolerance_value(parts[0], f"{where}: atol"), tolerance_value(parts[1], f"{where}: rtol")


def _int_value(value: Any, what: str, lowest: int) -> int:
    return number_option(value, what, whole=True, low=lowest, text=True)


@keyword_checked
@plain_options
@dataclass(frozen=True)
class CompareOptions:
    """How :func:`trt_backend.compare` compares a Session with the reference.

    ``tolerances``: per output name, ``(atol, rtol)`` replacing ``atol``/``rtol`` for it.
    ``error_stat``: which error must stay within tolerance, as Polygraphy's ``check_error_stat``
    ("elemwise": every element within atol *or* rtol). ``shapes``: input shapes to generate
    data with instead of the profiles' opt shapes; ``all_profile_shapes``: min, opt and max of
    every profile. (What precision is compared is the session's: ``SessionOptions.build`` or
    the build folder's.) ``atol_of_range``: each output's atol at least this fraction of the
    largest magnitude the reference gave it (box coordinates in pixels and probabilities then get
    tolerances that fit them). ``checks``: task checks (:mod:`trt_backend.accuracy.tasks`: top1,
    argmax-sequence, boxes) reported beside the numeric error; the verdict needs them too.
    ``val_range``/``int_range``: the range random float/integer inputs are drawn from, one (lo,
    hi) for all or per input name (floats in [lo, hi), integers in lo..hi with both ends; default
    [0, 1) and 0..2, see :mod:`trt_backend.ort.random_data`). ``localize``: "off", "mismatch" (look for the diverging
    segment when the comparison fails) or "always"; True means "mismatch"."""

    atol: float = DEFAULT_TOLERANCE
    rtol: float = DEFAULT_TOLERANCE
    tolerances: Mapping[str, tuple[float, float]] | Sequence[str] = field(default_factory=dict)
    error_stat: str = "elemwise"
    error_quantile: float = 0.99
    iterations: int = 1
    seed: int = 0
    shapes: Mapping[str, Sequence[int]] | None = None
    all_profile_shapes: bool = False
    localize: bool | str = "off"
    atol_of_range: float | None = None
    checks: Sequence[Any] = ()
    # a build folder made with --precision auto is judged by the rule its plan was searched with
    # where atol, rtol and atol_of_range are at their defaults and no output has its own (False:
    # by these options, whatever they are)
    folder_rule: bool = True
    val_range: Mapping[str, tuple[float, float]] | tuple[float, float] | None = None
    int_range: Mapping[str, tuple[int, int]] | tuple[int, int] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "atol", tolerance_value(self.atol, "atol"))
        object.__setattr__(self, "rtol", tolerance_value(self.rtol, "rtol"))
        object.__setattr__(self, "tolerances", MappingProxyType(self._checked_tolerances(self.tolerances)))
        if self.error_stat not in ERROR_STATS:
            raise OptionsError(f"unknown error statistic {self.error_stat!r}; choose one of {', '.join(ERROR_STATS)}")
        object.__setattr__(self, "error_quantile", number_option(self.error_quantile, "error_quantile", low=0.0,
                                                                 high=1.0, text=True))
        object.__setattr__(self, "iterations", _int_value(self.iterations, "iterations", 1))
        object.__setattr__(self, "seed", _int_value(self.seed, "seed", 0))
        if self.shapes is not None:
            object.__setattr__(self, "shapes", MappingProxyType(self._checked_shapes(self.shapes)))
        object.__setattr__(self, "localize", self._checked_localize(self.localize))
        if self.atol_of_range is not None:
            object.__setattr__(self, "atol_of_range", tolerance_value(self.atol_of_range, "atol_of_range"))
        specs = names_option(self.checks, "checks", item="task checks (str, e.g. 'top1')") \
            if not isinstance(self.checks, (list, tuple)) or not all(isinstance(c, TaskCheck) for c in self.checks) \
            else tuple(self.checks)
        object.__setattr__(self, "checks", tuple(TaskCheck.parse(c) for c in specs))
        object.__setattr__(self, "val_range", _ranges(self.val_range, "val_range", float))
        object.__setattr__(self, "int_range", _ranges(self.int_range, "int_range", int))

    @staticmethod
    def _checked_tolerances(raw: Mapping[str, Any] | Iterable[str]) -> dict[str, tuple[float, float]]:
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, Mapping):  # CLI-style "name:atol,rtol" strings
            out: dict[str, tuple[float, float]] = {}
            for text in names_option(raw, "tolerances", item="'output:atol,rtol' texts, or a dict by output name"):
                name, atol, rtol = parse_tolerance(text)
                out[name] = (atol, rtol)
            return out
        checked: dict[str, tuple[float, float]] = {}
        for name, pair in raw.items():
            if not isinstance(name, str) or not name:
                raise OptionsError(f"tolerances are keyed by output name, got {name!r}")
            if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise OptionsError(f"tolerance of '{name}' must be (atol, rtol), got {pair!r}")
            checked[name] = (tolerance_value(pair[0], f"atol of '{name}'"),
                             tolerance_value(pair[1], f"rtol of '{name}'"))
        return checked

    @staticmethod
    def _checked_shapes(raw: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
        if not isinstance(raw, Mapping):
            raise OptionsError(f"shapes must map input names to shapes, got {type(raw).__name__}")
        out: dict[str, tuple[int, ...]] = {}
        for name, shape in raw.items():
            if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
                raise OptionsError(f"shape of '{name}' must be a sequence of dims, got {shape!r}")
            out[str(name)] = tuple(_int_value(d, f"dim of '{name}'", 0) for d in shape)
        return out

    @staticmethod
    def _checked_localize(value: bool | str) -> str:
        if value is True:
            return "mismatch"
        if value is False or value is None:
            return "off"
        if value not in LOCALIZE_CHOICES:
            raise OptionsError(f"localize must be True, False or one of {', '.join(LOCALIZE_CHOICES)}, got {value!r}")
        return str(value)

    def tolerance_for(self, output_name: str) -> tuple[float, float]:
        """(atol, rtol) that apply to ``output_name`` (its own, else the global ones)."""
        return self.output_tolerances.get(output_name, (self.atol, self.rtol))

    @property
    def output_tolerances(self) -> Mapping[str, tuple[float, float]]:
        """``tolerances`` as read: output name -> (atol, rtol)."""
        t = self.tolerances
        return t if isinstance(t, Mapping) else self._checked_tolerances(t)

    def check_output_names(self, outputs: Sequence[str]) -> None:
        """Every per-output tolerance must name a model output."""
        unknown = [n for n in self.output_tolerances if n not in outputs]
        if unknown:
            raise OptionsError(f"--tolerance names unknown output(s) {', '.join(map(repr, unknown))}; "
                               f"the model's outputs are: {', '.join(outputs)}")


def _ranges(value: Any, what: str, kind: type) -> Any:
    """A (lo, hi) pair, or input name -> (lo, hi), checked (lo < hi); None stays None."""
    if value is None:
        return None

    def pair(v: Any, where: str) -> tuple[Any, Any]:
        if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or len(v) != 2:
            raise OptionsError(f"{where} must be (low, high), got {v!r}")
        try:
            lo, hi = kind(v[0]), kind(v[1])
        except (TypeError, ValueError):
            raise OptionsError(f"{where} must be two numbers, got {v!r}") from None
        if not lo < hi:
            raise OptionsError(f"{where}: low {lo} must be below high {hi}")
        return lo, hi

    if isinstance(value, Mapping):
        return MappingProxyType({str(n): pair(v, f"{what} of '{n}'") for n, v in value.items()})
    return pair(value, what)
