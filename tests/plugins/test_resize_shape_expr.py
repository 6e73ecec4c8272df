"""The Resize plugin's TensorRT shape function (``plugins.resize.tensorrt.output_dim``, what
``@trtp.register`` calls with ``tensorrt.plugin`` shape expressions) run with a fake shape
expression that implements only what TensorRT's ``ShapeExpr`` offers it (``is_fake``,
``is_constant``, ``constant_value()``, ``* int``, ``// int``), checked against the output shapes
of ONNX Runtime's Resize for many attribute combinations, static and dynamic input lengths."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plugins.resize.check import ort_run, random_cases
from plugins.resize.spec import ResizeParams, SpecError
from plugins.resize.tensorrt import output_dim


class Expr:
    """A fake IDimensionExpr: a length as a function of the symbolic input length ``n``; constant
    when TensorRT knows it at build time (never readable while ``is_fake``, as in TensorRT)."""

    def __init__(self, fn: Callable[[int], int], constant: int | None = None, fake: bool = False) -> None:
        self.fn, self._constant, self._fake = fn, constant, fake

    @classmethod
    def symbol(cls, fake: bool = False) -> Expr:
        return cls(lambda n: n, fake=fake)

    @classmethod
    def of(cls, value: int, fake: bool = False) -> Expr:
        return cls(lambda n: value, value, fake)

    @property
    def is_fake(self) -> bool:
        return self._fake

    @property
    def is_constant(self) -> bool:
        return self._constant is not None

    def constant_value(self) -> int:
        if self._fake or self._constant is None:
            raise AssertionError("constant_value() read from a fake or non-constant shape expression")
        return self._constant

    def __mul__(self, k: object) -> Expr:
        if not isinstance(k, int):
            return NotImplemented
        return Expr(lambda n: self.fn(n) * k, None if self._constant is None else self._constant * k, self._fake)

    def __floordiv__(self, k: object) -> Expr:
        if not isinstance(k, int) or k <= 0:
            return NotImplemented
        return Expr(lambda n: self.fn(n) // k, None if self._constant is None else self._constant // k, self._fake)


def evaluate(value: int | Expr, n: int) -> int:
    return value if isinstance(value, int) else value.fn(n)


def expressible(params: ResizeParams, d: int) -> bool:
    scale = params.scales[d]
    return params.sizes[d] >= 0 or scale == int(scale) or any(scale == 2.0 ** -m for m in range(1, 17))


def test_output_dim_matches_onnx_runtime_for_random_attribute_combinations() -> None:
    """300 random Resize calls (opsets 10-19, every mode, coordinate transformation, nearest
    mode, axes, antialias, sizes with aspect-ratio policies, roi): the shape function's lengths
    for the static input lengths are ONNX Runtime's output shape; for each axis whose scale has
    an exact expression, the symbolic length evaluated at 1..40 is the spec's floor(scale x n)."""
    against_ort = symbolic_axes = scaled_axes = 0
    for case in random_cases(300, seed=16):
        try:
            params = case.params()
        except SpecError:
            continue  # the predicate refuses it: the plugin never sees it
        try:
            want = ort_run(case.model(), {"x": case.input()})[0].shape
        except Exception:  # noqa: BLE001 - a call ONNX Runtime itself refuses has no reference
            want = None
        got = [evaluate(output_dim(params, d, Expr.of(n)), n) for d, n in enumerate(case.shape)]
        assert got == params.output_shape(case.shape), case.name
        if want is not None:
            assert tuple(got) == want, (case.name, case.attrs, case.scales, case.sizes)
            against_ort += 1
        for d in range(params.rank):
            if not expressible(params, d):
                with pytest.raises(ValueError, match=f"axis {d}: scale .* has no exact shape expression"):
                    output_dim(params, d, Expr.symbol())
                continue
            for fake in (False, True):
                value = output_dim(params, d, Expr.symbol(fake))
                assert [evaluate(value, n) for n in range(1, 41)] == [params.output_dim(d, n) for n in range(1, 41)]
            symbolic_axes += 1
            scaled_axes += params.sizes[d] < 0 and params.scales[d] != 1.0
    assert against_ort >= 250 and symbolic_axes >= 600 and scaled_axes >= 80, (against_ort, symbolic_axes, scaled_axes)


def dynamic_resize(rank: int, scales: list[float], mode: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [f"d{k}" for k in range(rank)])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
    graph = helper.make_graph([node], "dyn", [x], [y],
                              [numpy_helper.from_array(np.array(scales, np.float32), "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("scales, mode", [([1.0, 1.0, 2.0, 2.0], "nearest"), ([1.0, 1.0, 0.5, 0.25], "linear"),
                                          ([1.0, 3.0, 0.125, 4.0], "nearest"), ([2.0, 0.5], "cubic"),
                                          ([1.0, 1.0, 1.0, 0.0625, 2.0], "linear")])
def test_symbolic_lengths_match_onnx_runtime_on_a_dynamic_model(scales: list[float], mode: str) -> None:
    """One model with every length dynamic, run by ONNX Runtime at many input shapes: each output
    length is the shape function's expression of the symbolic input length, evaluated there."""
    rank = len(scales)
    params = ResizeParams(rank, 0, 0, 0, -0.75, 0, 0, 0.0, tuple(scales), (-1,) * rank, (0.0,) * rank + (1.0,) * rank)
    exprs = [output_dim(params, d, Expr.symbol()) for d in range(rank)]
    rng = np.random.default_rng(rank)
    model = dynamic_resize(rank, scales, mode)
    for _ in range(12):
        shape = tuple(int(v) for v in rng.integers(1, 40 if rank < 5 else 12, size=rank))
        (y,) = ort_run(model, {"x": rng.random(shape, dtype=np.float32)})
        assert y.shape == tuple(evaluate(e, n) for e, n in zip(exprs, shape)), shape
