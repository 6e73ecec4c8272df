"""ONNX's backend node test cases run two ways: ONNX Runtime CPU alone (``run_ort``) and
trt_backend.onnx_backend (``run_ours``: device "CPU", TensorRT segments emulated), each judged
passed, errored or mismatched against the case's expected outputs. The sweep over every case is
``benchmarks/conformance/backend_node_cases.py``; the tests run a fixed subset."""
from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

PASSED, ERRORED, MISMATCHED = "passed", "errored", "mismatched"


def convert(value: Any) -> Any:
    """Case data as runtimes take it: TensorProto -> array, numpy scalar -> 0-d array."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return [convert(v) for v in value]
    return value


def load_cases(pattern: str | None = None, every: int = 1) -> list[Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    if pattern:
        cases = [c for c in cases if re.search(pattern, c.name)]
    return cases[::every]


def data_sets(case: Any) -> list[tuple[list[Any], list[Any]]]:
    return [([convert(v) for v in ins], [convert(v) for v in outs]) for ins, outs in case.data_sets]


def compare(expected: Sequence[Any], got: Sequence[Any], case: Any) -> str | None:
    """None when ``got`` matches as the ONNX backend test runner judges it, else why not."""
    from onnx.backend.test.runner import Runner

    try:
        Runner.assert_similar_outputs(list(expected), list(got), rtol=case.rtol, atol=case.atol)
    except (AssertionError, TypeError, ValueError, IndexError) as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def _feed_names(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


def run_ort(case: Any) -> tuple[str, str | None]:
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = _feed_names(case.model)
        for ins, outs in data_sets(case):
            got = sess.run(None, dict(zip(names, ins)))
            why = compare(outs, got, case)
            if why:
                return MISMATCHED, why
    except Exception as e:  # noqa: BLE001 - any failure of the runtime is an "errored" case
        return ERRORED, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return PASSED, None


def run_ours(case: Any) -> tuple[str, str | None, tuple[int, int]]:
    from trt_backend import onnx_backend as backend

    placed = (0, 0)
    try:
        rep = backend.prepare(case.model, "CPU")
        plan = rep.plan
        on_trt = sum(len(s.nodes) for s in plan.segments if s.backend == "tensorrt")
        placed = (on_trt, len(plan.nodes))
        for ins, outs in data_sets(case):
            got = list(rep.run(ins))
            why = compare(outs, got, case)
            if why:
                return MISMATCHED, why, placed
    except Exception as e:  # noqa: BLE001
        return ERRORED, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}", placed
    return PASSED, None, placed
