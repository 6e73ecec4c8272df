"""Results of ``trt-backend bench``: plain data, the JSON document (a stable schema, extended
only by added keys), a terminal table and a PNG of the latency distribution per runner."""
from __future__ import annotations

import inspect
import io
import json
import os
from dataclasses import dataclass, field
from typing import Any

from trt_backend._files import write_atomic
from trt_backend.bench.stats import PERCENTILE_DEFINITION, LatencyStats
from trt_backend.errors import PlotError

SCHEMA = "trt-backend-bench/1"
RATIO_DEFINITION = ("ours_ratio = trt-backend median latency / this runner's median latency "
                    "(below 1: trt-backend is faster; 1.05: trt-backend takes 5% longer)")


@dataclass
class RunnerResult:
    """One runner's numbers; ``latency`` is None when it was not available (``reason`` says why)."""

    name: str
    available: bool
    reason: str | None = None
    latency: LatencyStats | None = None
    throughput_qps: float | None = None
    iterations: int = 0
    segments: list[dict[str, Any]] = field(default_factory=list)
    ours_ratio: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    samples_ms: list[float] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "available": self.available, "reason": self.reason,
                "latency_ms": self.latency.to_dict() if self.latency else None,
                "throughput_qps": self.throughput_qps, "iterations": self.iterations,
                "segments": self.segments, "ours_ratio": self.ours_ratio, **self.extra}


@dataclass
class BenchResult:
    model: str
    shapes: dict[str, list[int]]
    runners: list[RunnerResult]
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)  # "source", "built" (and a build folder's digest)

    def runner(self, name: str) -> RunnerResult:
        for r in self.runners:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "shapes": self.shapes, "runners": [r.to_dict() for r in self.runners],
                "schema": SCHEMA, "percentile_definition": PERCENTILE_DEFINITION,
                "ratio_definition": RATIO_DEFINITION, "settings": self.settings, "environment": self.environment,
                "plan": self.plan, "notes": self.notes, **self.source}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False, default=_jsonable)

    def table(self) -> str:
        return format_table(self)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


def _ms(v: float) -> str:
    return f"{v:.3f}" if v < 10 else f"{v:.2f}" if v < 1000 else f"{v:.0f}"


def _short(text: str, width: int = 150) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _shape_text(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{n}:{'x'.join(str(d) for d in s) or '[]'}" for n, s in shapes.items()) or "(no inputs)"


def format_table(result: BenchResult) -> str:
    """The terminal report: one row per runner (unavailable ones with their reason), the
    per-segment breakdown of ours, GPU phases where measured, build times."""
    s = result.settings
    lines = [f"model {result.model} | shapes {_shape_text(result.shapes)} | {result.plan.get('summary', '')}",
             f"warm-up {s.get('warmup_ms', 0):g} ms, then >= {s.get('duration_s', 0):g} s and >= "
             f"{s.get('iterations', 0)} iterations per runner, {s.get('rounds', 1)} round(s); host latency in ms"]
    if result.source.get("source") == "build folder":
        src = result.source
        lines.insert(1, f"build folder {src.get('folder')} (manifest {src.get('manifest_digest')}"
                        f"{', signed' if src.get('signed') else ''}): its engines as built, nothing planned, "
                        "calibrated or built here")
    head = (f"{'runner':<12} {'iters':>6} {'qps':>9} {'min':>8} {'mean':>8} {'median':>8} {'p90':>8} {'p95':>8} "
            f"{'p99':>8} {'max':>8} {'ours/this':>9}")
    lines += ["", head, "-" * len(head)]
    for r in result.runners:
        if not r.available or r.latency is None:
            lines.append(f"{r.name:<12} unavailable: {r.reason}")
            continue
        st = r.latency
        ratio = f"{r.ours_ratio:.3f}" if r.ours_ratio is not None else "-"
        lines.append(f"{r.name:<12} {r.iterations:>6} {r.throughput_qps or 0:>9.1f} {_ms(st.min):>8} {_ms(st.mean):>8} "
                     f"{_ms(st.median):>8} {_ms(st.p90):>8} {_ms(st.p95):>8} {_ms(st.p99):>8} {_ms(st.max):>8} "
                     f"{ratio:>9}")
    for r in result.runners:
        if r.segments:
            lines += ["", f"segments of {r.name} (mean ms per query, share of its mean latency):",
                      f"  {'id':>3} {'backend':<11} {'executor':<11} {'nodes':>6} {'mean ms':>9} {'share':>7}"]
            for seg in r.segments:
                gpu = seg.get("gpu_ms")
                gpu_text = ("  GPU " + ", ".join(f"{k} {v:.3f}" for k, v in gpu.items())) if gpu else ""
                lines.append(f"  {seg['id']:>3} {seg['backend']:<11} {seg['executor']:<11} {seg.get('nodes', 0):>6} "
                             f"{_ms(seg['mean_ms']):>9} {seg['share'] * 100:>6.1f}%{gpu_text}")
            if "overhead_ms" in r.extra:
                over = r.extra["overhead_ms"]
                share = over / r.latency.mean * 100 if r.latency and r.latency.mean else 0.0
                lines.append(f"  {'':>3} {'stitching (validation, routing, copies)':<37} {_ms(over):>9} {share:>6.1f}%")
    for r in result.runners:
        gpu = r.extra.get("gpu_ms")
        if gpu:
            lines.append(f"GPU time of {r.name} (CUDA events, mean ms): " +
                         ", ".join(f"{k} {v['mean']:.3f}" for k, v in gpu.items()))
    for r in result.runners:
        b = r.extra.get("build")
        if b and "seconds" in b:
            load = b.get("cached_load_seconds")
            hits = sum(bool(s.get("cached")) for s in b["segments"])
            again = ("" if b.get("all_cache_hits") else " (not every engine was found there)")
            lines.append(f"build of {r.name} ({b['flavor']}, {b['precision']}): {len(b['segments'])} engine(s) in "
                         f"{b['seconds']:.2f} s" + (f" ({hits} of them taken from the engine cache)" if hits else "")
                         + "; " + (f"loaded again from the engine cache in {load:.3f} s{again}" if load is not None
                                   else "no engine cache")
                         + (f"; {len(b['failures'])} segment(s) failed" if b.get("failures") else "")
                         + (f" ({b['note']})" if b.get("note") else ""))
        elif b and "skipped" in b:
            lines.append(f"build of {r.name}: skipped ({b['skipped']})")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def write_plot(result: BenchResult, path: str) -> None:
    """A PNG: latency distribution per available runner (box: quartiles, whiskers p1..p99, dots:
    mean), and ours' time per segment. matplotlib is imported here, with the Agg backend."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PlotError(f"--plot {path}: folder {folder} does not exist")
    try:  # the Agg canvas on a bare Figure: no pyplot, no global backend switch
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("--plot needs matplotlib (pip install matplotlib, or the 'bench' extra)") from None

    timed = [r for r in result.runners if r.available and r.samples_ms]
    ours = next((r for r in result.runners if r.segments), None)
    missing = [_short(f"{r.name} unavailable: {r.reason}") for r in result.runners if not r.available]
    foot = 0.13 * len(missing)  # inches of footnote
    fig = Figure(figsize=(12 if ours else 8, 1.8 + 0.7 * max(1, len(timed)) + foot))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2 if ours else 1, squeeze=False, gridspec_kw={"width_ratios": [3, 2]} if ours else None)
    ax = axes[0][0]
    if timed:
        flat = ({"orientation": "horizontal"} if "orientation" in inspect.signature(ax.boxplot).parameters
                else {"vert": False})  # matplotlib 3.10 renamed it
        ax.boxplot([r.samples_ms for r in timed], whis=(1, 99), showfliers=True,
                   flierprops={"markersize": 2, "alpha": 0.4}, **flat)
        ax.set_yticks(range(1, len(timed) + 1), [r.name for r in timed])
        ax.invert_yaxis()  # ours on top
        ax.plot([r.latency.mean for r in timed if r.latency], range(1, len(timed) + 1), "D", color="tab:red",
                markersize=4, label="mean")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("host latency per query (ms)")
    ax.set_title(f"{os.path.basename(result.model)} | {_shape_text(result.shapes)}", fontsize=9)
    if missing:
        fig.text(0.01, 0.01, "\n".join(missing), fontsize=6, va="bottom")
    if ours is not None:
        bx = axes[0][1]
        labels = [f"{s['id']} {s['executor']}" for s in ours.segments] + ["stitching"]
        values = [s["mean_ms"] for s in ours.segments] + [max(0.0, ours.extra.get("overhead_ms", 0.0))]
        bx.barh(range(len(values)), values, color=["tab:green" if s["backend"] == "tensorrt" else "tab:blue"
                                                  for s in ours.segments] + ["tab:gray"])
        bx.set_yticks(range(len(values)), labels, fontsize=7)
        bx.invert_yaxis()
        bx.set_xlabel(f"{ours.name}: mean ms per segment")
    fig.tight_layout(rect=(0, (foot + 0.05) / fig.get_figheight() if missing else 0, 1, 1))
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    try:
        write_atomic(path, png.getvalue())  # Never half a picture.
    except OSError as e:
        raise PlotError(f"--plot {path}: cannot write: {e.strerror or e}") from None


__all__ = ["BenchResult", "PlotError", "RATIO_DEFINITION", "RunnerResult", "SCHEMA", "format_table", "write_plot"]
