"""A picture of a :class:`Plan`: segments in execution order as a column of boxes coloured by
backend, arrows for the tensors flowing between them. SVG, or self-contained HTML around it.
Pure Python, deterministic; works for plans read back from JSON too."""
from __future__ import annotations

import html
import logging
import os
import re
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from partitioner.capability import ONNXRUNTIME, PLUGIN_PREFIX
from partitioner.errors import OptionsError
from partitioner.plan import Plan, Segment
from partitioner.report import (
    backend_label,
    census,
    clip,
    format_ops,
    header_line,
    op_counts,
    plural,
)

log = logging.getLogger(__name__)

STYLE = {  # backend -> (fill, stroke)
    "tensorrt": ("#dff0c4", "#5a8f00"),
    "onnxruntime": ("#d6e6f8", "#1f6fb2"),
    "io": ("#eeeeee", "#777777"),
}
PLUGIN_COLOR = "#e8890c"
FONT = "ui-monospace,Menlo,Consolas,monospace"
LEFT, TOP, BOX_W, PAD, LINE_H, GAP = 20, 20, 380, 8, 15, 40
CHARS = 52  # label characters per box line at 11px monospace
LANE_GAP, MAX_LANES, PORT_GAP = 16, 24, 5
TITLE_NAMES = 40  # names listed in one tooltip
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def esc(text: object) -> str:
    """Text safe in XML/HTML content and quoted attributes (also drops XML-illegal characters)."""
    return html.escape(_XML_INVALID.sub("\ufffd", str(text)), quote=True)


@dataclass
class Box:
    """One column entry: the model inputs, a segment or the model outputs."""

    pos: int
    kind: str  # "io" | backend name
    lines: list[str]
    title: str
    segment: Segment | None = None
    plugins: int = 0
    y: int = 0
    ins: list[Edge] = field(default_factory=list)
    outs: list[Edge] = field(default_factory=list)

    @property
    def height(self) -> int:
        ports = max(sum(e.lane >= 0 for e in self.ins), sum(e.lane >= 0 for e in self.outs))
        return max(2 * PAD + LINE_H * len(self.lines), 2 * PORT_GAP * (ports + 1))


@dataclass
class Edge:
    src: int  # column positions: 0 = model inputs, k = segment k-1, last = model outputs
    dst: int
    tensors: list[str]
    lane: int = -1


def flows(plan: Plan) -> dict[tuple[int, int], list[str]]:
    """Tensors passed between column positions (0 = model inputs, ``len(segments)+1`` =
    model outputs), keyed by (source, destination)."""
    sink = len(plan.segments) + 1
    producer = {t: s.id + 1 for s in plan.segments for t in s.outputs}
    edges: dict[tuple[int, int], list[str]] = {}
    for seg in plan.segments:
        for t in seg.inputs:
            edges.setdefault((producer.get(t, 0), seg.id + 1), []).append(t)
    if plan.model is not None:
        outputs = list(plan.model.index.graph_outputs)
    else:  # no model: a segment output nobody reads must be a model output
        read = {t for s in plan.segments for t in s.inputs}
        outputs = [t for s in plan.segments for t in s.outputs if t not in read]
    for t in outputs:
        edges.setdefault((producer.get(t, 0), sink), []).append(t)
    return dict(sorted(edges.items()))


def _names(label: str, names: Sequence[str]) -> str:
    shown = ", ".join(names[:TITLE_NAMES])
    more = f" … and {len(names) - TITLE_NAMES} more" if len(names) > TITLE_NAMES else ""
    return f"{label} ({len(names)}): {shown}{more}"


def _wrap(text: str, max_lines: int) -> list[str]:
    """Wrap at list separators (``Conv x5`` stays whole), at most ``max_lines`` lines."""
    glued = text.replace(" x", "\u00a0x")  # textwrap does not break at a no-break space
    lines = [line.replace("\u00a0", " ") for line in textwrap.wrap(glued, CHARS, break_on_hyphens=False)] or [""]
    if len(lines) > max_lines:
        lines = lines[: max_lines - 1] + [clip(" ".join(lines[max_lines - 1:]), CHARS)]
    return lines


def _segment_box(plan: Plan, seg: Segment) -> Box:
    infos = [plan.nodes[i] for i in seg.nodes]
    plugin_ops = Counter(f"{n.op_type} ({n.verdict[len(PLUGIN_PREFIX):]})" for n in infos
                         if n.verdict.startswith(PLUGIN_PREFIX))
    lines = [f"#{seg.id}  {backend_label(seg.backend)}  ·  {plural(len(infos), 'node')}"]
    lines += _wrap(format_ops(op_counts(plan, seg), 2 * CHARS), 2)
    if plugin_ops:
        lines += _wrap("◆ plugin: " + format_ops(sorted(plugin_ops.items()), 2 * CHARS), 2)
    reasons = Counter(n.reason for n in infos if n.verdict == ONNXRUNTIME and n.reason)
    title = [f"segment {seg.id}: {backend_label(seg.backend)}, {plural(len(infos), 'node')}",
             _names("nodes", [n.name for n in infos]), _names("inputs", seg.inputs),
             _names("outputs", seg.outputs)]
    if seg.copies:
        title.append(_names("constant-only nodes copied in", [plan.nodes[i].name for i in seg.copies]))
    title += [f"fallback x{k}: {r}" for r, k in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
    return Box(seg.id + 1, seg.backend, lines, "\n".join(title), seg, sum(plugin_ops.values()))


def _io_box(pos: int, label: str, names: Sequence[str]) -> Box:
    listing = ", ".join(names) if names else "none"
    lines = [f"{label} ({len(names)})"] + _wrap(listing, 2)
    return Box(pos, "io", lines, _names(label, names))


def layout(plan: Plan) -> tuple[list[Box], list[Edge], int, int]:
    """Boxes with their y positions, edges with lanes, and the picture's width and height."""
    edges_by_key = flows(plan)
    sink = len(plan.segments) + 1
    ins = [t for (src, _), ts in edges_by_key.items() if src == 0 for t in ts]
    outs = [t for (_, dst), ts in edges_by_key.items() if dst == sink for t in ts]
    boxes = ([_io_box(0, "model inputs", list(dict.fromkeys(ins)))]
             + [_segment_box(plan, s) for s in plan.segments] + [_io_box(sink, "model outputs", outs)])
    edges = [Edge(src, dst, ts) for (src, dst), ts in edges_by_key.items()]
    lanes = _assign_lanes(edges)
    for e in edges:
        boxes[e.src].outs.append(e)
        boxes[e.dst].ins.append(e)
    y = TOP
    for box in boxes:
        box.y = y
        y += box.height + GAP
    width = LEFT + BOX_W + 30 + LANE_GAP * min(lanes, MAX_LANES) + 40
    return boxes, edges, width, y - GAP + TOP


def _assign_lanes(edges: list[Edge]) -> int:
    """Greedy interval colouring of the edges that skip boxes; returns the number of lanes."""
    ends: list[int] = []
    for e in sorted((e for e in edges if e.dst - e.src > 1), key=lambda e: (e.src, e.dst)):
        free = next((k for k, end in enumerate(ends) if end <= e.src), None)
        if free is None:
            ends.append(e.dst)
            free = len(ends) - 1
        ends[free] = e.dst
        e.lane = free % MAX_LANES
    return len(ends)


def _port(box: Box, edge: Edge, outgoing: bool) -> int:
    """y of a side port: incoming arrows enter the upper half, outgoing leave the lower half.
    Outer lanes leave from higher ports and enter at lower ones, so lanes never cross there."""
    side = sorted((e for e in (box.outs if outgoing else box.ins) if e.lane >= 0),
                  key=lambda e: (-e.lane if outgoing else e.lane, e.src, e.dst))
    k = next(j for j, e in enumerate(side) if e is edge)
    half = box.height / 2
    return int(box.y + (half if outgoing else 0) + half * (k + 1) / (len(side) + 1))


def _edge_svg(boxes: list[Box], e: Edge) -> list[str]:
    src, dst = boxes[e.src], boxes[e.dst]
    count = len(e.tensors)
    tip = esc(f"{_where(src)} → {_where(dst)}\n" + _names("tensors", e.tensors))
    out = [f'<g class="edge" data-from="{_ref(src)}" data-to="{_ref(dst)}"><title>{tip}</title>']
    if e.lane < 0:  # neighbours: a straight arrow down the column
        cx, y0, y1 = LEFT + BOX_W // 2, src.y + src.height, dst.y
        out.append(f'<path d="M{cx},{y0} V{y1 - 2}" fill="none" stroke="#444" stroke-width="1.5" '
                   'marker-end="url(#arrow)"/>')
        label = plural(count, "tensor")
        out.append(f'<text x="{cx + 8}" y="{(y0 + y1) // 2 + 4}" font-size="11">{esc(label)}</text>')
    else:  # skips boxes: out to a lane on the right, down, back in
        x0, lx = LEFT + BOX_W, LEFT + BOX_W + 30 + LANE_GAP * e.lane
        ya, yb = _port(src, e, True), _port(dst, e, False)
        out.append(f'<path d="M{x0},{ya} H{lx} V{yb} H{x0 + 3}" fill="none" stroke="#666" '
                   'stroke-width="1.2" marker-end="url(#arrow)"/>')
        my = (ya + yb) // 2
        w = 7 * len(str(count)) + 6
        out.append(f'<rect x="{lx - w // 2}" y="{my - 8}" width="{w}" height="15" rx="7" fill="#fff" '
                   'stroke="#666" stroke-width="0.8"/>')
        out.append(f'<text x="{lx}" y="{my + 3}" font-size="10" text-anchor="middle">{count}</text>')
    out.append("</g>")
    return out


def _where(box: Box) -> str:
    return f"segment {box.segment.id}" if box.segment is not None else box.lines[0].split(" (")[0]


def _ref(box: Box) -> str:
    if box.segment is not None:
        return str(box.segment.id)
    return "inputs" if box.pos == 0 else "outputs"


def _box_svg(box: Box) -> list[str]:
    fill, stroke = STYLE.get(box.kind, STYLE["io"])
    cls = "segment" if box.segment is not None else "io"
    attrs = f'class="{cls}" data-segment="{box.segment.id}"' if box.segment is not None else f'class="{cls}"'
    out = [f"<g {attrs}><title>{esc(box.title)}</title>",
           f'<rect x="{LEFT}" y="{box.y}" width="{BOX_W}" height="{box.height}" rx="6" fill="{fill}" '
           f'stroke="{stroke}" stroke-width="1.5"/>']
    if box.plugins:
        out.append(f'<rect class="plugin-mark" x="{LEFT}" y="{box.y}" width="6" height="{box.height}" '
                   f'fill="{PLUGIN_COLOR}"/>')
    for k, line in enumerate(box.lines):
        weight = ' font-weight="bold"' if k == 0 else ""
        out.append(f'<text x="{LEFT + 12}" y="{box.y + PAD + LINE_H * k + 11}" font-size="11"{weight}>'
                   f"{esc(line)}</text>")
    out.append("</g>")
    return out


def render_svg(plan: Plan) -> str:
    """The plan as a standalone SVG document (no XML prolog, so it embeds in HTML as is)."""
    boxes, edges, width, height = layout(plan)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="{FONT}" role="img">',
           f"<title>{esc(f'partition of {plan.model_name}')}</title>",
           f'<rect class="background" width="{width}" height="{height}" fill="#ffffff"/>',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker></defs>']
    for box in boxes:
        out += _box_svg(box)
    for e in edges:
        out += _edge_svg(boxes, e)
    out.append("</svg>")
    return "\n".join(out) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}table{border-collapse:collapse;margin:1em 0;font-size:.9em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
td.n{text-align:right}.sw{display:inline-block;width:1em;height:1em;border:1px solid;margin:0 .3em 0 1em;
vertical-align:middle}.picture{overflow:auto;border:1px solid #ddd;max-height:80vh}code{font-size:.95em}"""


def render_html(plan: Plan) -> str:
    """Self-contained HTML page: header, legend, the SVG, a segment table and the fallback census."""
    legend = "".join(f'<span class="sw" style="background:{STYLE[b][0]};border-color:{STYLE[b][1]}"></span>'
                     f"{esc(backend_label(b))}" for b in ("tensorrt", "onnxruntime"))
    legend += (f'<span class="sw" style="background:{PLUGIN_COLOR};border-color:{PLUGIN_COLOR}"></span>'
               "holds plugin nodes (◆)<span class=\"sw\" style=\"background:#eee;border-color:#777\"></span>"
               "model inputs/outputs; numbers on arrows: tensors passed; hover for names and reasons")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{esc(plan.model_name)}: TensorRT / ONNX Runtime partition</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{esc(plan.model_name)}</h1>",
             f"<p>{esc(header_line(plan))}</p>", f"<p>{legend}</p>",
             f'<div class="picture">{render_svg(plan)}</div>', "<h2>Segments</h2>", _segment_table(plan),
             "<h2>Fallback census</h2>", _census_table(plan), "</body></html>"]
    return "\n".join(parts) + "\n"


def _segment_table(plan: Plan) -> str:
    rows = ["<table><tr><th>id</th><th>backend</th><th>nodes</th><th>inputs</th><th>outputs</th><th>ops</th></tr>"]
    for s in plan.segments:
        rows.append(f"<tr><td class=\"n\">{s.id}</td><td>{esc(backend_label(s.backend))}</td>"
                    f"<td class=\"n\">{len(s.nodes)}</td><td>{_tensor_cell(s.inputs)}</td>"
                    f"<td>{_tensor_cell(s.outputs)}</td><td>{esc(format_ops(op_counts(plan, s), 120))}</td></tr>")
    return "\n".join(rows + ["</table>"])


def _tensor_cell(names: Sequence[str]) -> str:
    shown = ", ".join(f"<code>{esc(n)}</code>" for n in names[:8])
    return f"{len(names)}: {shown}" + (" …" if len(names) > 8 else "")


def _census_table(plan: Plan) -> str:
    rows = census(plan)
    if not rows:
        return "<p>None: every node runs in TensorRT.</p>"
    lines = ["<table><tr><th>op</th><th>count</th><th>reason</th></tr>"]
    lines += [f"<tr><td>{esc(r.op_type)}</td><td class=\"n\">{r.count}</td><td>{esc(r.reason or '-')}</td></tr>"
              for r in rows]
    return "\n".join(lines + ["</table>"])


def render_picture(plan: Plan, path: str | os.PathLike[str]) -> str:
    """The picture for a file named ``path``: SVG (``.svg``) or HTML (``.html``/``.htm``)."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix == ".svg":
        text = render_svg(plan)
    elif suffix in (".html", ".htm"):
        text = render_html(plan)
    else:
        raise OptionsError(f"cannot tell the picture format from '{os.fspath(path)}': use a .svg, .html or .htm file")
    return text
