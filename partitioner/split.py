"""Split TensorRT groups whose weights pass a limit into the fewest pieces that each fit, cut
where the boundary cost model (:mod:`partitioner.cost`) prices the hand-over lowest.

A TensorRT builder holds a segment's weights several times over while it builds (the weights it
reads, the copies it makes for its layers, the engine it writes), so a process building one huge
segment needs several times the segment's weights in memory. Cutting the segment bounds that by
the largest piece. A group is a run of one topological order, so any cut into contiguous runs
keeps the segment graph acyclic; among the cuts into the fewest pieces, the one with the lowest
total price (a launch per cut plus the bytes that cross it) is taken, by a dynamic programme over
cut positions that is linear in the group's size. Weights count once per piece that reads them
(a weight both sides read is loaded by both builds); a node whose weights alone pass the limit
is in a piece with nothing that reads more weights."""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from partitioner.cost import BoundaryCost, tensor_bytes
from partitioner.graph import GraphIndex
from partitioner.weights import tensor_nbytes


def node_weights(index: GraphIndex, i: int) -> dict[str, int]:
    """Initializers node ``i`` reads (graph inputs with a default excluded), with their bytes."""
    out: dict[str, int] = {}
    graph_inputs = index.graph_inputs
    for name in index.reads[i]:
        t = index.initializer_protos.get(name)
        if t is not None and name not in graph_inputs:
            out[name] = tensor_nbytes(t) or 0
    return out


def weight_bytes(index: GraphIndex, nodes: Iterable[int]) -> int:
    """Bytes of the distinct initializers ``nodes`` read."""
    seen: dict[str, int] = {}
    for i in nodes:
        seen.update(node_weights(index, i))
    return sum(seen.values())


def split_by_weights(index: GraphIndex, nodes: Sequence[int], limit: int, cost: BoundaryCost | None = None,
                     lazy: frozenset[int] = frozenset()) -> list[tuple[int, ...]]:
    """``nodes`` (a group, in execution order) cut into the fewest contiguous pieces whose
    weights are each at most ``limit`` bytes, at the cheapest cuts by ``cost`` (default
    :class:`BoundaryCost`); ``[tuple(nodes)]`` when they fit whole. ``lazy`` (constant-only)
    nodes move to the piece of their first consumer, which computes them itself."""
    n = len(nodes)
    if n < 2 or weight_bytes(index, nodes) <= limit:
        return [tuple(nodes)]
    price = cost if cost is not None else BoundaryCost()
    per_node = [node_weights(index, i) for i in nodes]
    starts = _earliest_starts(per_node, limit)
    cut = _cut_prices(index, nodes, price, lazy)
    # best[j]: (pieces, price) of the best cut of nodes[:j]; back[j]: where its last piece starts
    best: list[tuple[int, float]] = [(0, 0.0)] + [(n + 1, 0.0)] * n
    back = [0] * (n + 1)
    window: deque[int] = deque()  # candidate starts i, their keys best[i] + cut[i] increasing
    nxt = 0  # next start to enter the window
    for j in range(1, n + 1):
        while nxt < j:  # starts i < j enter in order
            key = _key(best, cut, nxt)
            while window and _key(best, cut, window[-1]) >= key:
                window.pop()
            window.append(nxt)
            nxt += 1
        while window and window[0] < starts[j]:
            window.popleft()
        i = window[0]
        pieces, paid = _key(best, cut, i)
        best[j], back[j] = (pieces + 1, paid), i
    bounds = []
    j = n
    while j > 0:
        bounds.append((back[j], j))
        j = back[j]
    pieces_out = [list(nodes[a:b]) for a, b in reversed(bounds)]
    return _place_lazy(index, pieces_out, lazy)


def _key(best: list[tuple[int, float]], cut: list[float], i: int) -> tuple[int, float]:
    """The price of a cover of nodes[:i] continued by a piece starting at i."""
    pieces, paid = best[i]
    return pieces, paid + cut[i]


def _earliest_starts(per_node: Sequence[dict[str, int]], limit: int) -> list[int]:
    """``starts[j]``: the first i such that nodes i..j-1 fit: their weights within ``limit``, or
    within the weights of their heaviest node (a node heavier than the limit goes in some piece
    anyway; what reads nothing more may join it)."""
    starts = [0] * (len(per_node) + 1)
    held: dict[str, int] = {}  # initializer -> how many nodes of the window read it
    size = {name: b for w in per_node for name, b in w.items()}
    own = [sum(w.values()) for w in per_node]
    heaviest: deque[int] = deque()  # window positions, their own weights decreasing
    total = lo = 0
    for j, weights in enumerate(per_node, start=1):
        for name in weights:
            held[name] = held.get(name, 0) + 1
            if held[name] == 1:
                total += size[name]
        while heaviest and own[heaviest[-1]] <= own[j - 1]:
            heaviest.pop()
        heaviest.append(j - 1)
        while total > max(limit, own[heaviest[0]]) and lo < j - 1:
            for name in per_node[lo]:
                held[name] -= 1
                if held[name] == 0:
                    del held[name]
                    total -= size[name]
            lo += 1
            if heaviest[0] < lo:
                heaviest.popleft()
        starts[j] = lo
    return starts


def _cut_prices(index: GraphIndex, nodes: Sequence[int], cost: BoundaryCost, lazy: frozenset[int]) -> list[float]:
    """``cut[i]``: microseconds a cut before nodes[i] costs (a launch and the bytes made before
    it and read after it inside the group); ``cut[0]`` is 0 (no cut)."""
    n = len(nodes)
    position = {node: k for k, node in enumerate(nodes)}
    crossing = [0.0] * (n + 1)  # difference array over cut positions
    for k, node in enumerate(nodes):
        if node in lazy:  # Constant-only values are copied, not handed over.
            continue
        for name in index.writes[node]:
            last = max((position[c] for c in index.consumers.get(name, ()) if c in position), default=-1)
            if last > k:
                size = tensor_bytes(index, name, cost) or 0.0
                crossing[k + 1] += size
                crossing[last + 1] -= size
    out = [0.0] * (n + 1)
    running = 0.0
    for i in range(1, n):
        running += crossing[i]
        out[i] = cost.launch_us + running / (cost.handover_gbps * 1e3)
    out[n] = 0.0
    return out


def _place_lazy(index: GraphIndex, pieces: list[list[int]], lazy: frozenset[int]) -> list[tuple[int, ...]]:
    """Move each constant-only node to the piece of its first consumer in the group."""
    if not lazy:
        return [tuple(p) for p in pieces]
    piece_of = {node: k for k, p in enumerate(pieces) for node in p}
    order = {node: pos for pos, node in enumerate(node for p in pieces for node in p)}
    for k, p in enumerate(pieces):
        for node in list(p):
            if node not in lazy:
                continue
            readers = [c for name in index.writes[node]
                       for c in index.consumers.get(name, ()) if c in piece_of]
            if not readers:
                continue
            first = min(readers, key=order.__getitem__)
            if piece_of[first] != k:
                p.remove(node)
                pieces[piece_of[first]].append(node)
                piece_of[node] = piece_of[first]
    return [tuple(sorted(p, key=order.__getitem__)) for p in pieces if p]
