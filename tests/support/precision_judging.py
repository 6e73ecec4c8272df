"""How the precision head-to-head judges every tool's answer the same way: the worst error in units
of the project's tolerance (``tolerance_ratio``), task agreement with fp32 ONNX Runtime (top-1,
greedy CTC text, YOLO detections matched by class and IoU, text-mask IoU), each output's atol as
``--precision auto`` computes it, and the count of nodes a transform lowered to fp16. Used by
``benchmarks/conformance/precision_head_to_head.py``; tested on small arrays and one tiny model."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from trt_backend.accuracy.numeric import tolerance_ratio
from trt_backend.accuracy.tasks import TaskCheck, run_checks

NOT_COUNTED = frozenset({"Cast", "Constant", "ConstantOfShape"})
Feed = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


@dataclass
class Scores:
    worst: float = 0.0  # error / tolerance, max over outputs and inputs
    agreed: float = 0.0
    units: int = 0

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.units if self.units else None


def yolo_detections(raw: np.ndarray, score: float = 0.25, iou: float = 0.45) -> Outputs:
    """A YOLOv8 head (1, 4 + classes, anchors) as detections: (cx, cy, w, h) to corners, best
    class per anchor, score threshold, greedy NMS per class."""
    pred = np.asarray(raw, np.float64)[0].T
    boxes = np.concatenate([pred[:, :2] - pred[:, 2:4] / 2, pred[:, :2] + pred[:, 2:4] / 2], axis=1)
    classes, scores = pred[:, 4:].argmax(1), pred[:, 4:].max(1)
    keep: list[int] = []
    for i in [int(i) for i in np.argsort(-scores) if scores[i] >= score]:
        if all(classes[j] != classes[i] or _iou(boxes[i], boxes[j]) < iou for j in keep):
            keep.append(i)
    return {"boxes": boxes[keep], "scores": scores[keep], "classes": classes[keep]}


def _iou(p: np.ndarray, q: np.ndarray) -> float:
    w = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
    h = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
    union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - w * h
    return float(w * h / union) if union > 0 else 0.0


def agreement(task: str, ours: Sequence[Outputs], refs: Sequence[Outputs], names: Sequence[str]) -> tuple[float, int]:
    """(units agreeing, units compared) of the task check over every input."""
    if task == "text-mask":  # pixels of the text masks at 0.3: intersection over union, pooled
        inter = union = 0
        for a, b in zip(ours, refs):
            x, y = np.asarray(a[names[0]]) > 0.3, np.asarray(b[names[0]]) > 0.3
            inter += int(np.count_nonzero(x & y))
            union += int(np.count_nonzero(x | y))
        return float(inter), union
    if task == "boxes":
        check = TaskCheck("boxes", ("boxes", "scores", "classes"), score=0.25, iou=0.5)
        result = run_checks([check], [yolo_detections(a[names[0]]) for a in ours],
                            [yolo_detections(b[names[0]]) for b in refs], ["boxes", "scores", "classes"])[0]
    else:
        result = run_checks([TaskCheck(task, (names[0],))], ours, refs, names)[0]
    return result.agreed, result.total


def evaluate(run: Callable[[Feed], Outputs], feeds: Sequence[Feed], refs: Sequence[Outputs], names: Sequence[str],
             atols: Mapping[str, float], rtol: float, task: str | None) -> Scores:
    """The worst error / tolerance of ``run`` against ``refs`` on ``feeds`` by the one rule, and
    its task agreement (``task`` None: none)."""
    ours = [run(f) for f in feeds]
    worst = max((tolerance_ratio(o[n], r[n], atols[n], rtol) for o, r in zip(ours, refs) for n in names), default=0.0)
    agreed, units = agreement(task, ours, refs, names) if task else (0.0, 0)
    return Scores(worst, agreed, units)


def output_atols(refs: Sequence[Outputs], names: Sequence[str], atol: float,
                 of_range: float | None) -> dict[str, float]:
    """Each output's atol as the search computes it: the global one, raised to ``of_range`` x
    the output's largest finite magnitude on the validation references."""
    atols = dict.fromkeys(names, atol)
    if of_range:
        for n in names:
            peak = max(float(np.max(np.abs(v[np.isfinite(v)]), initial=0.0)) for v in (np.asarray(r[n]) for r in refs))
            atols[n] = max(atol, of_range * peak)
    return atols


def census(model: onnx.ModelProto) -> tuple[int, int]:
    """(nodes making a float tensor in fp16, nodes making a float tensor), Cast/Constant left out."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]  # a converter's stale declarations must not decide the types
    g = onnx.shape_inference.infer_shapes(m).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    low = total = 0
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}
    for node in g.node:
        made = [types.get(o) for o in node.output if o]
        if node.op_type in NOT_COUNTED or not any(t in floats for t in made):
            continue
        total += 1
        low += any(t == onnx.TensorProto.FLOAT16 for t in made)
    return low, total
