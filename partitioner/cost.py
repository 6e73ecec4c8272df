"""Fragmentation has a price: what a TensorRT group is estimated to save against what its
boundaries cost.

Every hand-over between segments costs a launch (an engine enqueue or an ONNX Runtime run
dispatch, and the event between them) and the bytes that cross it. A TensorRT group pays for
that only when running its nodes in TensorRT instead of ONNX Runtime saves more. Both sides are
estimates from the inferred shapes, with documented constants (:class:`BoundaryCost`, every one
overridable):

- a node's work is its FLOPs (2*M*N*K for MatMul/Gemm, 2*out*Cin/group*kernel for Conv and
  ConvTranspose, one per output element otherwise) and the bytes it reads and writes;
- TensorRT's time for a group is FLOPs / ``device_tflops`` + bytes / ``device_gbps``; ONNX Runtime
  is taken to need ``speedup`` times that on the same nodes, so the group saves
  (``speedup`` - 1) x its TensorRT time;
- its boundaries cost ``launch_us`` per neighbouring segment plus crossing bytes / ``handover_gbps``.

Dims the model leaves symbolic (a batch, a sequence) count as ``symbolic_dim``, except those named
in ``dims``: the sizes the model's input shapes give its named dims where the shapes it runs at are
known (:meth:`BoundaryCost.at_shapes`; trt_backend gives the first profile's opt shapes). Dims
nothing knows (data-dependent counts after NonZero, or no shape at all) count as ``unknown_dim``. A
group with a tensor of unknown rank or type is not judged (kept): an estimate needs sizes."""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import onnx

from partitioner.errors import OptionsError
from partitioner.options_check import number_option
from partitioner.graph import GraphIndex

_ITEM_BYTES: dict[int, int] = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
               onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.INT64: 8, onnx.TensorProto.INT32: 4,
               onnx.TensorProto.INT16: 2, onnx.TensorProto.UINT16: 2, onnx.TensorProto.INT8: 1,
               onnx.TensorProto.UINT8: 1, onnx.TensorProto.BOOL: 1, onnx.TensorProto.UINT32: 4,
               onnx.TensorProto.UINT64: 8, onnx.TensorProto.FLOAT8E4M3FN: 1, onnx.TensorProto.FLOAT8E5M2: 1,
               onnx.TensorProto.INT4: 1, onnx.TensorProto.UINT4: 1}


@dataclass(frozen=True)
class BoundaryCost:
    """Constants of the estimate (see the module doc). The defaults describe a data-centre GPU
    with both runtimes on the device: an engine launch plus an event is ~10 us; a boundary tensor
    is handed over as a device copy or a binding (~100 GB/s effective, counted once per crossing);
    TensorRT sustains ~20 TFLOP/s fp32 and ~1 TB/s on such graphs, about twice what ONNX
    Runtime's CUDA provider reaches on the same nodes (fusions)."""

    launch_us: float = 10.0
    handover_gbps: float = 100.0
    device_tflops: float = 20.0
    device_gbps: float = 1000.0
    speedup: float = 2.0
    symbolic_dim: int = 8
    unknown_dim: int = 64
    # the sizes of named dims where the shapes the model runs at are known: (name, size) pairs,
    # sorted (a mapping given is made one); the rest of the named dims count as symbolic_dim
    dims: tuple[tuple[str, int], ...] | Mapping[str, int] = ()
    # tensor -> its dims at those shapes, where shape inference sizes them in full, which size it
    # where its type leaves dims unknown or unnamed (derived from the shapes and the model, so
    # neither compared nor recorded: see partitioner.model.shapes_at)
    tensor_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False,
                                                       metadata={"derived": True})

    def __post_init__(self) -> None:
        number_option(self.launch_us, "boundary cost launch_us", low=0)
        for name in ("handover_gbps", "device_tflops", "device_gbps"):
            number_option(getattr(self, name), f"boundary cost {name}", above=0)
        number_option(self.speedup, "boundary cost speedup (TensorRT at least as fast)", low=1)
        for name in ("symbolic_dim", "unknown_dim"):
            number_option(getattr(self, name), f"boundary cost {name}", whole=True, low=1)
        pairs = self.dims.items() if isinstance(self.dims, Mapping) else self.dims
        try:
            dims = tuple(sorted((str(k), v) for k, v in pairs))
        except (TypeError, ValueError):
            raise OptionsError(f"boundary cost dims must be named sizes (name -> size), got {self.dims!r}") from None
        object.__setattr__(self, "dims", tuple((k, number_option(v, f"boundary cost dims['{k}']", whole=True, low=0))
                                               for k, v in dims))

    @cached_property
    def sizes(self) -> dict[str, int]:
        """``dims`` as a mapping."""
        return dict(self.dims)

    def at_shapes(self, index: GraphIndex, shapes: Mapping[str, Sequence[int]]) -> BoundaryCost:
        """These constants, with the sizes ``shapes`` (model input -> its shape) give the named
        dims of the model's inputs: a name given two sizes keeps the stand-in. Tensor dims found at
        other shapes are dropped (``tensor_dims``: the caller sizes them at these, see
        ``trt_backend.planning.with_tensor_dims``)."""
        return replace(self, dims=named_dim_sizes(index, shapes), tensor_dims={})


@dataclass(frozen=True)
class GroupCost:
    """The estimate for one TensorRT group. ``saved_us`` None: not judged (a size is unknown)."""

    flops: float
    bytes: float
    boundaries: int
    crossing_bytes: float
    saved_us: float | None
    cost_us: float

    @property
    def pays(self) -> bool:
        return self.saved_us is None or self.saved_us >= self.cost_us

    def describe(self) -> str:
        saved = "unknown" if self.saved_us is None else f"{self.saved_us:.2f} us"
        return (f"estimated to save {saved} ({_si(self.flops)}FLOP, {_si(self.bytes)}B moved) against "
                f"{self.cost_us:.2f} us for {self.boundaries} hand-over(s) of {_si(self.crossing_bytes)}B")


def si_bytes(x: float) -> str:
    return f"{_si(x)}B"


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} "


def tensor_bytes(index: GraphIndex, name: str, cost: BoundaryCost) -> float | None:
    """Bytes of tensor ``name`` (None: rank or type unknown)."""
    shape = tensor_shape(index, name, cost)
    tp = index.types.get(name)
    if shape is None or tp is None or not tp.HasField("tensor_type"):
        return None
    item = _ITEM_BYTES.get(tp.tensor_type.elem_type)
    return None if item is None else float(math.prod(shape)) * item


def named_dim_sizes(index: GraphIndex, shapes: Mapping[str, Sequence[int]]) -> tuple[tuple[str, int], ...]:
    """(name, size) of every named dim of the model's inputs that ``shapes`` (input -> shape) give
    one size, sorted; a name the shapes give two sizes is left out."""
    sizes: dict[str, int | None] = {}
    for vi in index.graph.input:
        shape, names = shapes.get(vi.name), dim_names(index, vi.name)
        if shape is None or names is None or len(shape) != len(names):
            continue
        for name, size in zip(names, shape):
            if name is not None:
                sizes[name] = int(size) if sizes.get(name, size) == size else None
    return tuple(sorted((k, v) for k, v in sizes.items() if v is not None))


def dim_names(index: GraphIndex, name: str) -> tuple[str | None, ...] | None:
    """The names of tensor ``name``'s dims (None for a dim without one, or one shape inference
    made up); None without a shape."""
    tp = index.types.get(name)
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_param if d.WhichOneof("value") == "dim_param" and d.dim_param
                 and not d.dim_param.startswith("unk__") else None for d in tp.tensor_type.shape.dim)


def tensor_shape(index: GraphIndex, name: str, cost: BoundaryCost) -> tuple[int, ...] | None:
    dims = index.dims_of(name)
    if dims is None:
        return None
    if min(dims, default=0) >= 0:
        return dims
    sized = cost.tensor_dims.get(name)
    if sized is not None and len(sized) == len(dims):
        return sized
    sizes, names = cost.sizes, dim_names(index, name) if cost.dims and -1 in dims else None
    return tuple(d if d >= 0 else cost.unknown_dim if d != -1 else
                 sizes.get(names[k] or "", cost.symbolic_dim) if names is not None else cost.symbolic_dim
                 for k, d in enumerate(dims))


def node_flops(index: GraphIndex, i: int, cost: BoundaryCost) -> float | None:
    node = index.graph.node[i]
    outs = [tensor_shape(index, o, cost) for o in index.writes[i]]
    if not outs or any(s is None for s in outs):
        return None
    out_elems = float(sum(math.prod(s) for s in outs if s is not None))
    op = node.op_type
    if op in ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul") and node.input:
        a = tensor_shape(index, node.input[0], cost)
        if a is None or not a:
            return None
        k = a[-1]
        if op == "Gemm" and any(at.name == "transA" and at.i for at in node.attribute) and len(a) >= 2:
            k = a[-2]
        return 2.0 * out_elems * k
    if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv") and len(node.input) > 1:
        w = tensor_shape(index, node.input[1] if op != "QLinearConv" else node.input[3], cost)
        if w is None or len(w) < 2:
            return None
        per_out = math.prod(w[1:]) if op != "ConvTranspose" else w[0] * math.prod(w[2:])
        return 2.0 * out_elems * per_out
    return out_elems


def group_cost(index: GraphIndex, nodes: Iterable[int], group_of: Sequence[int], cost: BoundaryCost,
               skip: frozenset[int] = frozenset()) -> GroupCost:
    """The estimate for the group ``nodes`` (``group_of[i]``: the group of node i; ``skip``:
    constant-only nodes, which are copied rather than handed over)."""
    members = set(nodes)
    flops = moved = 0.0
    known = True
    crossing: dict[str, float] = {}
    neighbours: set[int] = set()
    me = group_of[next(iter(members))] if members else -1
    sizes: dict[str, float | None] = {}  # each tensor's bytes, worked out once per call

    def size(name: str) -> float | None:
        if name not in sizes:
            sizes[name] = tensor_bytes(index, name, cost)
        return sizes[name]

    for i in members:
        f = node_flops(index, i, cost)
        if f is None:
            known = False
            continue
        flops += f
        for name in (*index.reads[i], *index.writes[i]):
            b = size(name)
            if b is None:
                known = False
                continue
            moved += b
        for name in index.reads[i]:
            p = index.producer.get(name)
            if p is not None and p not in members and p not in skip and group_of[p] != me:
                neighbours.add(group_of[p])
                crossing[name] = size(name) or 0.0
        for name in index.writes[i]:
            for c in index.consumers.get(name, ()):
                if c not in members and group_of[c] != me:
                    neighbours.add(group_of[c])
                    crossing[name] = size(name) or 0.0
    crossing_bytes = sum(crossing.values())
    cost_us = len(neighbours) * cost.launch_us + crossing_bytes / (cost.handover_gbps * 1e3)
    trt_us = flops / (cost.device_tflops * 1e6) + moved / (cost.device_gbps * 1e3)
    saved = (cost.speedup - 1.0) * trt_us if known else None
    return GroupCost(flops, moved, len(neighbours), crossing_bytes, saved, cost_us)


def crossing_tensors(index: GraphIndex, group_of: Sequence[int], skip: frozenset[int] = frozenset()
                     ) -> Iterator[str]:
    """The tensors handed from one group to another per run (their producers not in ``skip``)."""
    for name, p in index.producer.items():
        if p not in skip and any(group_of[c] != group_of[p] for c in index.consumers.get(name, ())):
            yield name


def crossing(index: GraphIndex, group_of: Sequence[int], cost: BoundaryCost,
             skip: frozenset[int] = frozenset()) -> tuple[int, float, int]:
    """Tensors handed from one group to another per run: (count, bytes, of them of unknown size)."""
    return tally(index, crossing_tensors(index, group_of, skip), cost)


def tally(index: GraphIndex, names: Iterable[str], cost: BoundaryCost) -> tuple[int, float, int]:
    """(count, bytes, of them of unknown size) of the tensors ``names``."""
    count = unknown = 0
    total = 0.0
    for name in names:
        count += 1
        b = tensor_bytes(index, name, cost)
        if b is None:
            unknown += 1
        else:
            total += b
    return count, total, unknown
