"""Group nodes into segments: TensorRT groups merged as far as possible without a cycle.

Segments are runs of one topological order, so the segment graph is acyclic by construction.
The order is chosen greedily: keep emitting ready nodes of the current backend and switch
backend only when none is ready. A group is never split by anything but a real dependency
on the other backend, and no TensorRT group can feed an ONNX Runtime node that feeds it back."""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from partitioner.capability import ONNXRUNTIME, TENSORRT, Verdict
from partitioner.cost import BoundaryCost, group_cost
from partitioner.extract import constant_only, copies_for
from partitioner.graph import GraphIndex
from partitioner.split import split_by_weights

# Why 3: ONNX Runtime's TensorRT EP defaults to 1, and users measure fragmented graphs running
# several times slower than plain CUDA (onnxruntime#17434, #16886): each segment boundary costs
# an engine launch and a hand-over between runtimes. One or two cheap nodes between fallbacks do
# not pay for that; a single heavy op (a Conv, a MatMul) does, so groups holding one are kept.
DEFAULT_MIN_SEGMENT_SIZE = 3
HEAVY_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "LSTM", "GRU", "RNN",
                       "Attention", "MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul",
                       "If", "Loop", "Scan"})
FREE_OPS = frozenset({"Constant"})  # not counted towards a group's size


@dataclass(frozen=True)
class Group:
    backend: str  # "tensorrt" | "onnxruntime"
    nodes: tuple[int, ...]  # in execution order
    copies: tuple[int, ...] = ()  # constant-only nodes of other groups it reads, copied in (ascending)


def color_runs(index: GraphIndex, colors: Sequence[str], lazy: frozenset[int] = frozenset()) -> list[Group]:
    """Split a topological order into backend runs by the greedy rule (see module doc).

    ``lazy`` nodes (constant-only nodes: Constant, ConstantOfShape of an initializer, and what
    reads only those) are not scheduled on their own: each is emitted right before its first
    consumer, in that consumer's run."""
    n = len(colors)
    pending = [sum(1 for name in index.reads[i] if _counts(index.producer.get(name), lazy)) for i in range(n)]
    ready: dict[str, list[int]] = {TENSORRT: [], ONNXRUNTIME: []}
    for i in range(n):
        if pending[i] == 0 and i not in lazy:
            ready[colors[i]].append(i)
    for heap in ready.values():
        heapq.heapify(heap)
    waiting = set(lazy)
    groups: list[Group] = []
    run: list[int] = []
    firsts = ready[TENSORRT][:1] + ready[ONNXRUNTIME][:1]
    current = colors[min(firsts)] if firsts else TENSORRT
    while ready[TENSORRT] or ready[ONNXRUNTIME]:
        heap = ready[current]
        if not heap:
            if run:
                groups.append(Group(current, tuple(run)))
                run = []
            current = ONNXRUNTIME if current == TENSORRT else TENSORRT
            continue
        i = heapq.heappop(heap)
        _pull(index, i, waiting, run)
        run.append(i)
        for out in index.writes[i]:
            for c in index.consumers.get(out, ()):
                pending[c] -= 1
                if pending[c] == 0:
                    heapq.heappush(ready[colors[c]], c)
    if run:
        groups.append(Group(current, tuple(run)))
    if sum(len(g.nodes) for g in groups) != n:
        raise RuntimeError("partition: not every node was scheduled (graph index inconsistent)")
    return groups


def _pull(index: GraphIndex, i: int, waiting: set[int], run: list[int]) -> None:
    """Append the waiting constant-only producers node ``i`` reads (theirs first) to ``run``.
    Depth first with an explicit stack: a chain of such producers may be as long as the graph."""
    stack = [(i, iter(index.reads[i]))]
    while stack:
        node, reads = stack[-1]
        for name in reads:
            p = index.producer.get(name)
            if p is not None and p in waiting:
                waiting.discard(p)
                stack.append((p, iter(index.reads[p])))
                break
        else:
            stack.pop()
            if stack:  # ``i`` itself is the caller's to append.
                run.append(node)


def _demote_unpaying(index: GraphIndex, groups: Sequence[Group], colors: list[str], final: list[Verdict],
                     cost: BoundaryCost, lazy: frozenset[int]) -> bool:
    """Send to ONNX Runtime every TensorRT group whose estimated saving is below the price of
    its boundaries; True if any was."""
    group_of = [0] * len(colors)
    for k, g in enumerate(groups):
        for i in g.nodes:
            group_of[i] = k
    changed = False
    for g in groups:
        if g.backend != TENSORRT:
            continue
        own = [i for i in g.nodes if colors[i] == TENSORRT and i not in lazy]
        if not own or any(index.graph.node[i].op_type in HEAVY_OPS for i in own):
            continue  # a heavy op pays (the size rule's policy; its saving is not estimated here)
        est = group_cost(index, own, group_of, cost, lazy)
        if est.boundaries == 0 or est.pays:
            continue
        _demote(g, colors, final, f"demoted: its TensorRT group does not pay for its boundaries: {est.describe()}")
        changed = True
    return changed


def _demote(group: Group, colors: list[str], final: list[Verdict], reason: str) -> None:
    """Send the group's TensorRT nodes to ONNX Runtime with ``reason``."""
    for i in group.nodes:
        if colors[i] == TENSORRT:
            colors[i] = ONNXRUNTIME
            final[i] = Verdict(ONNXRUNTIME, reason)


def _counts(producer: int | None, lazy: frozenset[int]) -> bool:
    return producer is not None and producer not in lazy


def partition(index: GraphIndex, verdicts: Sequence[Verdict], min_segment_size: int = DEFAULT_MIN_SEGMENT_SIZE,
              cost: BoundaryCost | None = BoundaryCost(), *,
              max_segment_weights: int | None = None) -> tuple[list[Group], list[Verdict]]:
    """Backend groups in execution order, and the verdicts after demotions: TensorRT groups
    below ``min_segment_size`` counted nodes (Constant not counted) and holding no heavy op go
    to ONNX Runtime, then groups without a heavy op that do not pay for their boundaries by
    ``cost``'s estimate (:mod:`partitioner.cost`), and the grouping is redone until it is stable.
    ``min_segment_size`` 1 (or ``cost`` None) keeps every group TensorRT takes from the cost
    rule. A constant-only node belongs to the group of its first consumer; every other group
    that reads it gets a copy (``Group.copies``). ``max_segment_weights``: TensorRT groups whose
    weights pass that many bytes are cut into the fewest pieces that fit, at the cheapest
    boundaries (:func:`partitioner.split.split_by_weights`)."""
    nodes = index.graph.node
    colors = [TENSORRT if v.on_tensorrt else ONNXRUNTIME for v in verdicts]
    lazy = constant_only(index, [v.backend == TENSORRT for v in verdicts])
    final = list(verdicts)
    while True:
        groups = color_runs(index, colors, lazy)
        changed = False
        for g in groups:
            if g.backend != TENSORRT:
                continue
            counted = [i for i in g.nodes if colors[i] == TENSORRT and nodes[i].op_type not in FREE_OPS]
            if len(counted) >= min_segment_size or any(nodes[i].op_type in HEAVY_OPS for i in counted):
                continue
            _demote(g, colors, final, f"demoted: TensorRT group of {len(counted)} node(s) is below the minimum "
                                      f"segment size {min_segment_size}")
            changed = True
        if not changed and cost is not None and min_segment_size > 1:
            changed = _demote_unpaying(index, groups, colors, final, cost, lazy)
        if not changed:
            break
    for g in groups:
        if g.backend == ONNXRUNTIME:
            for i in g.nodes:
                if final[i].on_tensorrt:
                    final[i] = Verdict(ONNXRUNTIME, "constant-only node placed with its ONNX Runtime consumer")
    if max_segment_weights is not None:
        groups = [Group(g.backend, piece) for g in groups
                  for piece in (split_by_weights(index, g.nodes, max_segment_weights, cost, lazy)
                                if g.backend == TENSORRT else [g.nodes])]
    return [Group(g.backend, g.nodes, copies_for(index, g.nodes, lazy)) for g in groups], final
