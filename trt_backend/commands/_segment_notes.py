"""What a build folder's segment entry says about the precision it computes in, in words: read by
``build``'s summary and ``inspect DIR``. Plain text work on the manifest only: ``build`` prints it
also where its build index answered before onnx or numpy loaded."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trt_backend.engines.precision_plan import qdq_words, subgraphs_words, unreduced_words


def stored_label(counts: Mapping[str, int]) -> str:
    """:func:`trt_backend.engines.precision.stored_reduced`'s counts in words, for a segment built
    in fp32: "" where the model holds no 16-bit floats."""
    low = [k for k in ("fp16", "bf16") if counts.get(k)]
    if not low:
        return ""
    if not counts.get("fp32"):
        return f"computes in {' and '.join(low)}: the model's own types"
    total = sum(counts.values())
    return f"{' and '.join(low)} in {sum(counts[k] for k in low)} of {total} float tensors: the model's own types"


def precision_notes(segment: Mapping[str, Any]) -> list[str]:
    """What a build folder's segment entry says about the precision it computes in beyond its
    label: the types of the model's own Q/DQ in a build of another precision, the model's own 16-bit
    types in an fp32 build (:func:`stored_label`), the nodes a reduced build kept fp32."""
    notes = []
    precision = segment.get("precision")
    if segment.get("qdq_nodes") and precision != "int8":  # (an int8 build's own Q/DQ: "int8" says it)
        kinds = qdq_words(segment["qdq_types"]) if segment.get("qdq_types") else "quantized"  # (older folders)
        notes.append(f"{kinds} at the model's {segment['qdq_nodes']} Q/DQ nodes")
    if segment.get("stored_types"):
        notes.append(stored_label(segment["stored_types"]))
    if segment.get("pinned") and precision not in (None, "fp32", "tf32"):
        notes.append(f"{len(segment['pinned'])} node(s) kept fp32")
    unreduced = segment.get("unreduced")
    if unreduced:
        notes.append(unreduced_words(unreduced))
    elif segment.get("int8_none"):
        notes.append("int8 asked: no Conv, ConvTranspose, MatMul or Gemm of it was quantized")
    held = segment.get("fp32_subgraphs")
    if held and (precision not in (None, "fp32", "tf32") or unreduced):
        notes.append(subgraphs_words(held, bool(unreduced)))
    return notes

