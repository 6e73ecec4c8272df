"""Model inputs and outputs as onnxruntime describes them (``NodeArg``): what given and derived
profiles are checked against, and what feed validation reads."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from trt_backend.ort.random_data import ValueRange, index_ranges

Dim = int | str | None


@dataclass(frozen=True)
class NodeArg:
    """A model input or output, described as onnxruntime's ``NodeArg`` does: ``shape`` lists
    ints for fixed dims, the symbol (str) or None for dynamic ones, and is ``[]`` when the rank
    is unknown; ``type`` reads like ``tensor(float)`` or ``seq(tensor(int64))``."""

    name: str
    shape: list[Dim]
    type: str
    rank: int | None = None  # None: unknown rank (or not a tensor)
    dtype: np.dtype | None = None  # numpy dtype of a tensor value; None when not a tensor
    # ours, not onnxruntime's: the range random integers for this input are drawn from by default
    # where the graph gathers table rows with it, or the categories its OneHotEncoders know, of any
    # dtype (trt_backend.ort.random_data.index_ranges)
    int_range: ValueRange | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        """``tensor``, ``seq``, ``optional``, ``map`` or ``unknown`` (the head of ``type``)."""
        return self.type.split("(", 1)[0] if "(" in self.type else "unknown"

    def named_dims(self) -> list[tuple[int, str]]:
        """(axis, name) of each dim named by the model: ONNX's dim_param names one size throughout
        the graph, so inputs holding the same name must agree on it (exporters' placeholder names,
        ``unk__N``, name nothing shared)."""
        if self.rank is None:
            return []
        return [(axis, d) for axis, d in enumerate(self.shape)
                if isinstance(d, str) and d and not d.startswith("unk__")]

    @property
    def is_dynamic(self) -> bool:
        return self.kind == "tensor" and (self.rank is None or any(not isinstance(d, int) for d in self.shape))


def type_string(tp: onnx.TypeProto | None) -> str:
    """onnxruntime's spelling of a value type."""
    kind = tp.WhichOneof("value") if tp is not None else None
    if tp is None or kind is None:
        return "unknown"
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(tp, kind).elem_type
        name = onnx.TensorProto.DataType.Name(elem).lower() if elem else "unknown"
        return f"{'sparse_tensor' if kind == 'sparse_tensor_type' else 'tensor'}({name})"
    if kind == "sequence_type":
        return f"seq({type_string(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_string(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key},{type_string(tp.map_type.value_type)})"
    return "unknown"


def numpy_dtype(elem_type: int) -> np.dtype | None:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return None


def node_arg(name: str, tp: onnx.TypeProto | None) -> NodeArg:
    kind = tp.WhichOneof("value") if tp is not None else None
    if tp is None or kind != "tensor_type":
        return NodeArg(name, [], type_string(tp))
    tt = tp.tensor_type
    dtype = numpy_dtype(tt.elem_type) if tt.elem_type else None
    if not tt.HasField("shape"):
        return NodeArg(name, [], type_string(tp), None, dtype)
    dims: list[Dim] = []
    for d in tt.shape.dim:
        which = d.WhichOneof("value")
        dims.append(int(d.dim_value) if which == "dim_value" else d.dim_param if which == "dim_param" else None)
    return NodeArg(name, dims, type_string(tp), len(dims), dtype)


def graph_inputs(graph: onnx.GraphProto) -> list[NodeArg]:
    """The NodeArg of each input of ``graph``, with the range random integers are drawn from for
    the inputs it gathers table rows with."""
    ranges = index_ranges(graph)
    return [replace(node_arg(vi.name, vi.type), int_range=ranges.get(vi.name)) for vi in graph.input]


def shape_text(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def named_shapes(shapes: Mapping[str, Sequence[int]], most: int | None = None) -> str:
    """Tensors' shapes in words, ``x 2x3, y scalar`` (the first ``most`` of them, and how many
    more): what a run or a build at shapes the model cannot take is read against."""
    said = [f"{name} {'x'.join(str(d) for d in shape) or 'scalar'}" for name, shape in shapes.items()]
    kept = said if most is None else said[:most]
    return ", ".join(kept) + (f" and {len(said) - len(kept)} more" if len(said) > len(kept) else "")
