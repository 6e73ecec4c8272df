"""Types shape inference could not give, learned by running the model in ONNX Runtime.

ONNX's shape inference knows nothing after an operator it has no rule for (``ai.onnx.ml`` ops,
custom ops), and every TensorRT candidate downstream then has an input of unknown rank, which
TensorRT cannot take. Running the model answers what inference could not: it runs twice on
seeded random inputs, with every dynamic input dim at 2 and then at 3, and the tensors' dtypes
and ranks are read off; a dim that is the same in both runs is static, one that follows an input's
named dim is given that name, any other stays unknown. The partitioner records the tensors as
learned (``partitioner.model.learn_types``); a probe that fails is logged with the tensors it
could not learn, whose consumers then stay on ONNX Runtime."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from partitioner import Model
from partitioner.model import learn_types, unknown_tensor_types
from trt_backend.errors import TrtBackendError
from trt_backend.ort.options import OrtOptions
from trt_backend.ort.sessions import tapped_session
from trt_backend.ort.values import random_array

log = logging.getLogger(__name__)

HOW = "an ONNX Runtime probe run"
PROBE_DIMS = (2, 3)  # each dynamic input dim, in the first and the second run


def learn_unknown_types(model: Model) -> list[str]:
    """Learn the types of ``model``'s tensors of unknown dtype or rank by probe runs (see the
    module's docstring); returns the tensors learned. Nothing to learn: no run at all."""
    unknown = unknown_tensor_types(model)
    if not unknown:
        return []
    try:
        runs, symbols = _probe(model, unknown)
    except (TrtBackendError, _Unprobeable) as e:
        log.warning("%s: the types of %d tensor(s) are unknown after shape inference (%s) and could not be "
                    "learned by running the model (%s); the nodes reading them run on ONNX Runtime", model.source,
                    len(unknown), _names(unknown), e)
        return []
    types = {}
    for name in unknown:
        tp = _type_of(name, [r.get(name) for r in runs], symbols)
        if tp is not None:
            types[name] = tp
    missed = [n for n in unknown if n not in types]
    if missed:
        log.info("%s: probe runs did not show the type of %s", model.source, _names(missed))
    learn_types(model, types, HOW)
    return list(types)


class _Unprobeable(Exception):
    """The model's inputs cannot be made up (unknown rank or dtype, non-tensor inputs)."""


def _names(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _probe(model: Model, names: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[int, str]]]:
    """The values of ``names`` in one run per PROBE_DIMS entry, and per run the input dim names
    by value (a dim of that value in that run may be the named one)."""
    run = tapped_session(model, names, OrtOptions(), f"probe run of {model.source}")
    runs, symbols = [], []
    for k, size in enumerate(PROBE_DIMS):
        rng = np.random.default_rng(k)
        feeds, named = {}, {}
        for vi in model.proto.graph.input:
            tp = vi.type
            if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.elem_type \
                    or not tp.tensor_type.HasField("shape"):
                raise _Unprobeable(f"input '{vi.name}' is not a tensor of known dtype and rank")
            shape = []
            for d in tp.tensor_type.shape.dim:
                if d.WhichOneof("value") == "dim_value":
                    shape.append(int(d.dim_value))
                else:
                    shape.append(size)
                    if d.WhichOneof("value") == "dim_param":
                        named[d.dim_param] = size
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tp.tensor_type.elem_type))
            feeds[vi.name] = random_array(dtype, tuple(shape), rng, f"probe input '{vi.name}'")
        runs.append(run(feeds, names))
        symbols.append({v: s for s, v in named.items()})  # (every named dim has the run's one size)
    return runs, symbols


def _type_of(name: str, values: Sequence[Any], symbols: Sequence[dict[int, str]]) -> onnx.TypeProto | None:
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    if len(arrays) != len(values) or len({a.dtype for a in arrays}) != 1 or len({a.ndim for a in arrays}) != 1:
        return None
    try:
        elem = onnx.helper.np_dtype_to_tensor_dtype(arrays[0].dtype)
    except (KeyError, TypeError, ValueError):
        return None
    tp = onnx.helper.make_tensor_type_proto(elem, None)
    shape = tp.tensor_type.shape
    shape.SetInParent()  # a known rank, even 0
    for axis in range(arrays[0].ndim):
        sizes = [a.shape[axis] for a in arrays]
        dim = shape.dim.add()
        if len(set(sizes)) == 1:
            dim.dim_value = sizes[0]
        else:
            names = {s.get(size) for s, size in zip(symbols, sizes)}
            if len(names) == 1 and None not in names:
                dim.dim_param = names.pop()  # type: ignore[assignment]
    return tp
