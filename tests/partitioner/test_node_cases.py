"""Every ONNX backend node case through the planner with the real parser: each segment is a
standalone model that passes the full checker and loads in ONNX Runtime whenever the original
does (benchmarks/conformance/node_case_sweep.py prints the same sweep as a report)."""
from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from onnx.backend.test.case.node import collect_testcases

from partitioner import InvalidModelError, PartitionOptions, plan_model
from partitioner.model import check_model

CASES = collect_testcases("")


def loads_in_ort(proto: onnx.ModelProto) -> bool:
    try:
        ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        return True
    except Exception:  # noqa: BLE001 - ORT refusing a model is the answer we record
        return False


def passes_full_check(proto: onnx.ModelProto) -> bool:
    try:
        check_model(proto, where="case", full=True)
        return True
    except InvalidModelError:
        return False


@pytest.mark.parametrize("chunk", range(8))
def test_node_cases_plan_into_loadable_segments(chunk: int, oracle) -> None:
    cases = CASES[chunk::8]
    failures: list[str] = []
    segments = tensorrt_segments = 0
    for case in cases:
        m = case.model
        assert m is not None  # (ONNX's node cases all carry their model)
        plan = plan_model(m, oracle, PartitionOptions(min_segment_size=1))
        if not loads_in_ort(m):
            continue  # ONNX Runtime itself refuses it: nothing to compare the segments with
        original_checks = passes_full_check(m)
        for seg in plan.segments:
            sub = plan.extract(seg.id)
            segments += 1
            tensorrt_segments += seg.backend == "tensorrt"
            if original_checks and not passes_full_check(sub):
                failures.append(f"{case.name} segment {seg.id}: full checker")
            if not loads_in_ort(sub):
                failures.append(f"{case.name} segment {seg.id}: ONNX Runtime refuses it")
    assert failures == []
    assert segments >= len(cases) // 2 and tensorrt_segments > 0


def test_the_sweep_covers_the_whole_suite() -> None:
    assert len(CASES) > 1500
