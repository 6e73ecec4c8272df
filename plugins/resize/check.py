"""Checks of the host-compiled Resize kernel against ONNX Runtime (and the ONNX backend suite).

Shared by ``benchmarks/device/resize_kernel_check.py`` (hundreds of combinations) and the CI tests (a
broad subset). ONNX Runtime is imported on first use."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import host
from .spec import ResizeParams, SpecError, make_params, read_attributes

log = logging.getLogger(__name__)

ATOL = 1e-5


@dataclass(frozen=True)
class Case:
    """One Resize call: attributes, input shape and the constant roi/scales/sizes."""

    name: str
    opset: int
    attrs: dict[str, Any]
    shape: tuple[int, ...]
    roi: tuple[float, ...] | None = None
    scales: tuple[float, ...] | None = None
    sizes: tuple[int, ...] | None = None
    seed: int = 0

    def model(self) -> onnx.ModelProto:
        inits, names = [], ["x"]
        for key, values, dtype in (("roi", self.roi, np.float32), ("scales", self.scales, np.float32),
                                   ("sizes", self.sizes, np.int64)):
            if key == "roi" and self.opset == 10:
                continue
            if values is None:
                names.append("")
                continue
            inits.append(numpy_helper.from_array(np.array(values, dtype), key))
            names.append(key)
        while names[-1] == "":
            names.pop()
        if self.opset == 11:  # Resize-11 takes roi and scales as required inputs
            for k, key in ((1, "roi"), (2, "scales")):
                if k >= len(names) or names[k] == "":
                    inits.append(numpy_helper.from_array(np.zeros(0, np.float32), key))
                    names += [""] * (k + 1 - len(names))
                    names[k] = key
        node = helper.make_node("Resize", names, ["y"], **self.attrs)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, self.shape)
        graph = helper.make_graph([node], self.name, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        return model

    def params(self) -> ResizeParams:
        node = self.model().graph.node[0]
        arr = {k: None if v is None else np.array(v) for k, v in (("roi", self.roi), ("scales", self.scales),
                                                                  ("sizes", self.sizes))}
        return make_params(read_attributes(node, self.opset), self.shape, arr["roi"], arr["scales"], arr["sizes"])

    def input(self) -> np.ndarray:
        return np.random.default_rng(self.seed).standard_normal(self.shape).astype(np.float32)


@dataclass
class Tally:
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    refused_by_ort: int = 0
    refused_by_spec: list[str] = field(default_factory=list)
    masked: int = 0  # passed with ONNX Runtime's misplaced NHWC extrapolation values masked out

    @property
    def total(self) -> int:
        return self.passed + len(self.failed)


def ort_divergence(case: Case) -> str | None:
    """Why ONNX Runtime's answer is known to be wrong for ``case``, or None.

    NHWC (4-D, axes 1 and 2 resized) cubic or antialiased Resize with tf_crop_and_resize:
    ONNX Runtime writes the extrapolation value at NCHW positions (its HandleExtrapolation
    assumes NCHW); the interpolated values are right, the extrapolated ones land elsewhere."""
    out = case.params().output_shape(case.shape)
    scaled = [d for d, (a, b) in enumerate(zip(case.shape, out)) if a != b]
    nhwc = len(case.shape) == 4 and scaled and set(scaled) <= {1, 2} and 1 in scaled
    crop = case.attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
    aa_or_cubic = case.attrs.get("antialias") or case.attrs["mode"] == "cubic"
    return "ONNX Runtime NHWC extrapolation layout" if nhwc and crop and aa_or_cubic else None


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX Runtime's Resize, the reference. (plugins sit below trt_backend's ONNX Runtime glue, so
    this reference session follows a process switched to global thread pools by itself.)"""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    data = model.SerializeToString()
    try:
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # only the global-pool refusal is retried
        if "global thread pool" not in str(e):
            raise
        opts.use_per_session_threads = False
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def compare(case: Case, tally: Tally, dtype: str = "float32") -> None:
    """Run ``case`` through ONNX Runtime and the host kernel; count the outcome in ``tally``."""
    x = case.input()
    try:
        expected = ort_run(case.model(), {"x": x})[0]
    except Exception:  # noqa: BLE001 - ONNX Runtime refuses many legal layouts (e.g. cubic on 3-D)
        tally.refused_by_ort += 1
        return
    try:
        params = case.params()
    except SpecError as e:
        tally.refused_by_spec.append(f"{case.name}: {e}")
        return
    if dtype == "float16":
        got = host.run(params, x.astype(np.float16)).astype(np.float32)
        atol, rtol = 2e-3, 2e-3
    else:
        got, atol, rtol = host.run(params, x), ATOL, 0.0
    keep = np.ones(expected.shape, bool)
    if ort_divergence(case) and got.shape == expected.shape:
        value = np.float32(case.attrs.get("extrapolation_value", 0.0))
        keep = (expected != value) & (got != value) & (got != np.float32(np.float16(value)))
        tally.masked += 1
    ok = got.shape == expected.shape and bool(np.all(np.abs(got - expected)[keep]
                                                     <= atol + rtol * np.abs(expected[keep])))
    if ok:
        tally.passed += 1
    else:
        err = float(np.max(np.abs(got - expected))) if got.shape == expected.shape else float("inf")
        tally.failed.append(f"{case.name}: shape {got.shape} vs {expected.shape}, max error {err:.3g}")


# ---- random combinations ---------------------------------------------------------------------

SCALE_CHOICES = (0.5, 0.6, 0.75, 0.8, 1.25, 1.5, 1.7, 2.0, 2.5, 3.0, 0.33, 0.4)
CTM_CHOICES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn", "tf_crop_and_resize")


def _resized_axes(rng: np.random.Generator, mode: str, rank: int) -> list[int]:
    """Axes to resize in layouts ONNX Runtime accepts for the mode."""
    if mode == "nearest":
        k = int(rng.integers(1, rank + 1))
        return sorted(rng.choice(rank, size=k, replace=False).tolist())
    if rank in (2, 3):
        return sorted(rng.choice(rank, size=int(rng.integers(1, rank + 1)), replace=False).tolist())
    if rank == 4 and rng.random() < 0.2:
        return [1, 2]  # NHWC
    inner = list(range(2, rank))
    return sorted(rng.choice(inner, size=int(rng.integers(1, len(inner) + 1)), replace=False).tolist())


def random_case(k: int, rng: np.random.Generator) -> Case:
    opset = int(rng.choice([10, 11, 13, 18, 19], p=[0.08, 0.12, 0.15, 0.25, 0.4]))
    mode = str(rng.choice(["nearest", "linear", "cubic"]))
    rank = int(rng.choice([2, 4])) if mode == "cubic" else int(rng.choice([2, 3, 4, 5]))
    shape = tuple(int(rng.integers(1, 8)) for _ in range(rank))
    axes = _resized_axes(rng, mode, rank)
    attrs: dict[str, Any] = {"mode": mode}
    roi = None
    if opset > 10:
        ctm = str(rng.choice(CTM_CHOICES))
        if ctm == "half_pixel_symmetric" and opset < 19:
            ctm = "half_pixel"
        attrs["coordinate_transformation_mode"] = ctm
        if mode == "nearest":
            attrs["nearest_mode"] = str(rng.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
        if mode == "cubic":
            attrs["cubic_coeff_a"] = float(rng.choice([-0.75, -0.5, float(np.float32(rng.uniform(-1, -0.3)))]))
            attrs["exclude_outside"] = int(rng.integers(0, 2))
        if ctm == "tf_crop_and_resize":
            attrs["extrapolation_value"] = float(np.float32(rng.uniform(-2, 2)))
    use_axes = opset >= 18 and rng.random() < 0.4
    if use_axes:
        attrs["axes"] = axes
    if opset >= 18 and mode != "nearest" and rng.random() < 0.4:
        attrs["antialias"] = 1
        if mode == "linear" and rng.random() < 0.3:
            attrs["exclude_outside"] = 1
    listed = axes if use_axes else list(range(rank))
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        starts = [float(np.float32(rng.uniform(-0.2, 0.5))) if a in axes else 0.0 for a in listed]
        ends = [float(np.float32(rng.uniform(0.5, 1.2))) if a in axes else 1.0 for a in listed]
        roi = tuple(starts + ends)
    scales = sizes = None
    if opset > 10 and rng.random() < 0.4:
        sizes = tuple(int(max(1, round(shape[a] * float(rng.choice(SCALE_CHOICES))))) if a in axes else shape[a]
                      for a in listed)
        if opset >= 18 and rng.random() < 0.4:
            attrs["keep_aspect_ratio_policy"] = str(rng.choice(["not_larger", "not_smaller"]))
    else:
        scales = tuple(float(rng.choice(SCALE_CHOICES)) if a in axes else 1.0 for a in listed)
    if opset == 10 and mode == "cubic":
        attrs["mode"] = "linear"
    name = f"random_{k}_op{opset}_{attrs['mode']}_r{rank}"
    return Case(name, opset, attrs, shape, roi, scales, sizes, seed=k)


def random_cases(count: int, seed: int = 0) -> Iterator[Case]:
    rng = np.random.default_rng(seed)
    for k in range(count):
        yield random_case(k, rng)


# ---- the ONNX backend node suite ---------------------------------------------------------------

def _array(value: Any) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def backend_resize_cases() -> list[Any]:
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):  # the suite's own generators warn
        warnings.simplefilter("ignore")
        cases = collect_testcases("")
    return [c for c in cases if c.model is not None and c.model.graph.node[0].op_type == "Resize"]


def check_backend_case(case: Any) -> tuple[bool, bool]:
    """(kernel matches the suite's expected output, kernel matches ONNX Runtime) for one case."""
    model = case.model
    if model is None:
        raise ValueError(f"backend case {case.name} carries no model")
    node = model.graph.node[0]
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    names = [i.name for i in model.graph.input]
    ok_ref = ok_ort = True
    for inputs, outputs in case.data_sets:
        feeds = {n: _array(v) for n, v in zip(names, inputs)}
        get = {role: feeds.get(node.input[k]) if len(node.input) > k and node.input[k] else None
               for k, role in ((1, "roi"), (2, "scales"), (3, "sizes"))}
        if opset == 10:
            get = {"roi": None, "scales": feeds[node.input[1]], "sizes": None}
        x = feeds[node.input[0]]
        params = make_params(read_attributes(node, opset), x.shape, get["roi"], get["scales"], get["sizes"])
        got = host.run(params, x)
        expected = _array(outputs[0])
        ok_ref &= got.shape == expected.shape and bool(np.all(np.abs(got - expected) <= ATOL))
        theirs = ort_run(model, feeds)[0]
        ok_ort &= got.shape == theirs.shape and bool(np.all(np.abs(got - theirs) <= ATOL))
    return ok_ref, ok_ort
